// Package lifecycle is the start and stop machinery shared by the
// long-running components (the scheduler, the narrator and the skill
// worker): one Service per component instance, embedded or held in a
// field, that
//
//   - starts once: a second Start, or a Start after Stop, is an error
//     naming the state the service is in;
//   - owns the component's work context, which Stop cancels (and which a
//     failed Start cancels too);
//   - runs background goroutines (Go) that Stop, and a failed Start, wait
//     for;
//   - stops once: Stop is idempotent, safe before Start (the service is
//     then never started) and concurrently with Start (it waits for Start
//     to return); every caller of Stop returns once the stop is over;
//   - reports its state (State, Ready, Stopping, Done).
//
// The component keeps what is its own: Stop takes the steps to run before
// the work context is cancelled (stop taking work, let running work finish
// for a grace period) and after its goroutines have ended (release what
// is left), so the order of a shutdown stays the component's.
package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// State is where a Service is in its life.
type State int

// The states of a Service. The legal moves are Idle → Starting →
// Running or Failed → Stopping → Stopped, and Idle → Stopped (Stop
// before Start).
const (
	// Idle: built, not started.
	Idle State = iota
	// Starting: Start is running the component's start function.
	Starting
	// Running: started; Stop has not begun.
	Running
	// Failed: the start function returned an error; its context is
	// cancelled and its goroutines have ended. Only Stop is left to call.
	Failed
	// Stopping: Stop is running.
	Stopping
	// Stopped: Stop is over (or was called before Start).
	Stopped
)

// String names the state, as errors and Ready report it.
func (s State) String() string {
	switch s {
	case Idle:
		return "not started"
	case Starting:
		return "starting"
	case Running:
		return "running"
	case Failed:
		return "failed to start"
	case Stopping:
		return "stopping"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// StateError is returned by Start when the service is not Idle, and by
// Ready when it is not Running.
type StateError struct {
	// Name is the component's name, given to New.
	Name string
	// Op is what was asked: "start" or "ready".
	Op string
	// State is the state the service was in.
	State State
}

// Error reads e.g. "scheduler: cannot start: running".
func (e *StateError) Error() string {
	if e.Op == "ready" {
		return e.State.String()
	}
	return fmt.Sprintf("%s: cannot %s: %s", e.Name, e.Op, e.State)
}

// Service is one component instance's life. Build it with New; its
// methods are safe for concurrent use.
type Service struct {
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	state State
	// started is closed when the start function has returned (or when
	// Stop came first).
	started chan struct{}
	// stopping is closed when Stop begins; done when it is over.
	stopping chan struct{}
	done     chan struct{}
	// running counts the goroutines of Go; draining is set once the
	// service waits for them to end (Stop, or a failed start), and
	// drained is closed when it has none left then.
	running  int
	draining bool
	drained  chan struct{}
	stopOnce sync.Once
	// kept hands a function of GoKept to a goroutine waiting idle.
	kept chan func(ctx context.Context)
}

// New builds an Idle service for the component called name (it prefixes
// Start's errors).
func New(name string) *Service {
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{name: name, ctx: ctx, cancel: cancel, started: make(chan struct{}),
		stopping: make(chan struct{}), done: make(chan struct{}), drained: make(chan struct{}), kept: make(chan func(context.Context))}
}

// Context is the component's work context: cancelled by Stop (after its
// drain step) and by a failed Start. It is never nil.
func (s *Service) Context() context.Context { return s.ctx }

// State returns the service's state now.
func (s *Service) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Ready returns nil while the service is Running, and a *StateError
// naming its state otherwise.
func (s *Service) Ready() error {
	if st := s.State(); st != Running {
		return &StateError{Name: s.name, Op: "ready", State: st}
	}
	return nil
}

// Stopping is closed when Stop begins (or when it is called before
// Start): from then on the component should take no new work.
func (s *Service) Stopping() <-chan struct{} { return s.stopping }

// Done is closed when Stop is over.
func (s *Service) Done() <-chan struct{} { return s.done }

// Start runs start, the component's own start, once: the service is
// Starting while it runs and Running after it returns nil. start gets the
// work context (Context). If start fails, the work context is cancelled,
// the goroutines started with Go are waited for, the service is Failed
// and start's error is returned; Stop is still to be called (it runs the
// component's stop steps, which must cope with a partial start). Start on
// a service that is not Idle returns a *StateError and does not run
// start.
func (s *Service) Start(start func(ctx context.Context) error) error {
	s.mu.Lock()
	if s.state != Idle {
		st := s.state
		s.mu.Unlock()
		return &StateError{Name: s.name, Op: "start", State: st}
	}
	s.state = Starting
	s.mu.Unlock()

	err := start(s.ctx)
	if err != nil {
		s.cancel()
		s.wait()
	}
	s.mu.Lock()
	if err != nil {
		s.state = Failed
	} else {
		s.state = Running
	}
	close(s.started)
	s.mu.Unlock()
	return err
}

// Go runs fn on a goroutine that Stop waits for, with the work context.
// It reports whether fn was started: once the service has no goroutine
// left to wait for after a stop or a failed start has begun waiting (or
// before Start), fn is not run. A goroutine of Go may call Go until it
// returns, and Stop's drain step may always call it (after a failed
// start too).
func (s *Service) Go(fn func(ctx context.Context)) bool {
	s.mu.Lock()
	if s.state == Idle || s.state == Stopped || (s.draining && s.running == 0) {
		s.mu.Unlock()
		return false
	}
	s.running++
	s.mu.Unlock()
	go func() {
		defer s.exit()
		fn(s.ctx)
	}()
	return true
}

// keptIdle is how long a goroutine of GoKept waits for its next function
// before it ends.
const keptIdle = 5 * time.Second

// GoKept runs fn as Go does, but on a goroutine that an earlier fn of
// GoKept ran on, when one waits idle: a goroutine whose fn is over waits up
// to keptIdle for the next, and ends then or when the work context is
// cancelled. A new goroutine starts with a small stack and grows it by
// copying, over again for every short task that goes deep (a job's
// decoding, checking and publishing: a twentieth of a worker's CPU in
// figure 9); a kept one has grown already. It returns false as Go does;
// a fn handed to an idle goroutine runs even if Stop begins meanwhile.
func (s *Service) GoKept(fn func(ctx context.Context)) bool {
	select {
	case s.kept <- fn:
		return true
	default:
	}
	return s.Go(func(ctx context.Context) {
		fn(ctx)
		idle := time.NewTimer(keptIdle)
		defer idle.Stop()
		for {
			select {
			case fn := <-s.kept:
				fn(ctx)
				idle.Reset(keptIdle)
			case <-idle.C:
				return
			case <-ctx.Done():
				return
			}
		}
	})
}

// exit counts one goroutine of Go out.
func (s *Service) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if s.running == 0 && s.draining {
		close(s.drained)
	}
}

// wait waits until no goroutine of Go runs; none starts after that.
func (s *Service) wait() {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		if s.running == 0 {
			close(s.drained)
		}
	}
	s.mu.Unlock()
	<-s.drained
}

// Stop stops the service once; every call returns when the stop is over.
//
// Called before Start, it only moves the service to Stopped: neither
// step runs, and Start then fails. Called while Start runs, it waits for
// Start to return. Otherwise it closes Stopping, runs drain (the
// component's steps while its work context is still live: stop taking
// work, let the work running finish for a while), cancels the work
// context, waits for the goroutines of Go, runs finish (the component's
// last steps) and closes Done. drain and finish may be nil.
func (s *Service) Stop(drain, finish func()) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		first := s.state == Idle
		if first {
			s.state = Stopped
			close(s.started)
		}
		s.mu.Unlock()
		if first {
			close(s.stopping)
			s.cancel()
			s.wait()
			close(s.done)
			return
		}
		<-s.started
		s.mu.Lock()
		if s.state == Failed {
			// The failed start waited for its goroutines; the stop's
			// steps may start more, waited for below like any others.
			s.draining = false
			s.drained = make(chan struct{})
		}
		s.state = Stopping
		s.mu.Unlock()
		close(s.stopping)
		if drain != nil {
			drain()
		}
		s.cancel()
		s.wait()
		if finish != nil {
			finish()
		}
		s.mu.Lock()
		s.state = Stopped
		s.mu.Unlock()
		close(s.done)
	})
	<-s.done
}
