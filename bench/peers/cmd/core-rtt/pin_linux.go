package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// pin keeps the calling thread on cpu.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin a thread to CPU %d: %w", cpu, err)
	}
	return nil
}

// allowedCPUs lists the CPUs this process may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read this process's CPUs: %w", err)
	}
	var cpus []int
	for cpu := 0; cpu < len(set)*64 && len(cpus) < set.Count(); cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}
