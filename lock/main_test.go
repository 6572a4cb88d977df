package lock_test

import (
	"testing"

	"github.com/hotkv/stampede/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	redistest.Main(m, map[string]func() int{
		"counter": workerCounter,
		"hold":    workerHold,
		"fence":   workerFence,
		"cron":    workerCron,
		"handoff": workerHandoff,
		"waiter":  workerWaiter,
		"semhold": workerSemHold,
	})
}
