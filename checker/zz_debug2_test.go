package checker

import (
	"time"

	"github.com/anishathalye/porcupine"
)

func porcupineCheck(m porcupine.Model, ops []porcupine.Operation, d time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(m, ops, d)
}
