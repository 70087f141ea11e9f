// Package peers adds the lock services kahuna is compared with to
// kahuna-bench: Redis (the single-instance SET NX PX recipe) and etcd
// (concurrency.Mutex); and the election failover benchmark (RunFailover,
// cmd/failover), kahuna's Campaign beside etcd's concurrency.Election. It
// is a module of its own so that the core module does not depend on their
// clients.
package peers
