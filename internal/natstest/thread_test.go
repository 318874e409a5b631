package natstest

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestServerOutlivesTheThreadThatAskedForIt: a server started by a
// goroutine that then ends locked to its thread — Go discards that thread,
// as it does the script runner's — keeps running: the parent-death signal
// follows the thread that started the server, so Start keeps one for it.
func TestServerOutlivesTheThreadThatAskedForIt(t *testing.T) {
	started := make(chan *Server)
	var ask func()
	ask = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if syscall.Gettid() == os.Getpid() {
			go ask() // Go keeps the main thread (wedged) rather than end it: another one
			return
		}
		started <- Start(t)
	}
	go ask()
	srv := <-started
	time.Sleep(200 * time.Millisecond) // a signal to the server lands by then
	select {
	case <-srv.node.exited:
		t.Fatalf("the server was killed with the thread that asked for it: %v", srv.node.cmd.ProcessState)
	default:
	}
	if err := srv.NC.Flush(); err != nil {
		t.Fatalf("the server does not answer: %v", err)
	}
}
