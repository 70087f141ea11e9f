// Package checker holds the correctness checkers of the fault tests, in the
// manner of Jepsen's lock workloads and etcd's robustness tests:
//
//   - CheckLinearizable: a porcupine model of the lock state machine,
//     partitioned per resource, with leases (a lock may lapse once its TTL
//     has surely run out) and indeterminate operations handled as "maybe":
//     their return is at infinity and any outcome is allowed.
//   - CheckExclusion: definite hold windows, from an acquire's completion to
//     the earliest instant its lease could have lapsed (a release call, or
//     grant call + TTL − margin), and the Holds recorded by clients that
//     hold through a handle (how long the holder acted: to its deadline);
//     no two owners may overlap.
//   - CheckFencing: among acquisitions ordered in real time a different
//     owner gets a strictly larger token, the same owner a token no smaller;
//     no token is granted to two owners.
//   - CheckStaleLeader: no definite answer from a node's own Locker after a
//     reign of a later term had begun (a deposed leader answering from its
//     cache, or its stale decision committed).
//
// Reign events (Kind Reign) record when a partition's leadership really
// changed: a node began to serve it in a new Raft term. On ephemeral locks,
// which live in the leader's memory, a reign ends every hold and restarts
// the tokens; the other checkers allow that across a reign, and only
// across one.
//
// A History is recorded by a Recorder (safe for concurrent use) around each
// call to a lock service. Times are monotonic, relative to the recorder's
// start. The checkers assume the lease clock of the service runs at the rate
// of the recorder's clock, within Options.Margin.
package checker
