package natstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// node is one nats-server process: its configuration file and store
// survive it, so it can be stopped, killed and started again on both.
type node struct {
	name   string
	dir    string // its config, ports file, log and store
	conf   string // the config file
	bin    string
	cmd    *exec.Cmd
	exited chan struct{}
	client string // nats://host:port, once started
}

// nodeConfig is what a node's config file says.
type nodeConfig struct {
	name       string
	port       int // -1 picks a free one the first time
	maxPayload int32
	cluster    string // cluster name, "" for a single server
	routePort  int
	routes     []int
}

// newNode writes a node's config in a temporary folder of t.
func newNode(t testing.TB, c nodeConfig) (*node, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	n := &node{name: c.name, dir: t.TempDir(), bin: bin}
	n.conf = filepath.Join(n.dir, "nats.conf")
	return n, n.write(c)
}

func (n *node) write(c nodeConfig) error {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nhost: 127.0.0.1\nport: %d\n", c.name, c.port)
	fmt.Fprintf(&b, "ports_file_dir: %q\n", n.dir)
	if c.maxPayload > 0 {
		fmt.Fprintf(&b, "max_payload: %d\n", c.maxPayload)
	}
	fmt.Fprintf(&b, "jetstream { store_dir: %q }\n", filepath.Join(n.dir, "store"))
	if c.cluster != "" {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: [", c.cluster, c.routePort)
		for i, p := range c.routes {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "\"nats://127.0.0.1:%d\"", p)
		}
		b.WriteString("]\n}\n")
	}
	return os.WriteFile(n.conf, []byte(b.String()), 0o600)
}

// start runs the process and waits up to wait for it to take clients.
func (n *node) start(wait time.Duration) error {
	log, err := os.OpenFile(filepath.Join(n.dir, "nats.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(n.bin, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = dieWithParent()
	n.cmd, n.exited = cmd, make(chan struct{})
	// The kernel's parent-death signal follows the thread that started the
	// server, not the process: started from any thread of Go's pool, the
	// server was SIGKILLed when a goroutine of the process under test
	// discarded that thread (the script runner ends the locked threads it
	// forks scripts from), and the test saw a minute of timeouts. So the
	// server is started, and waited for, from a thread kept for it alone.
	started := make(chan error, 1)
	go func(done chan struct{}) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}(n.exited)
	if err := <-started; err != nil {
		n.cmd = nil
		return fmt.Errorf("start nats-server %s: %w", n.name, err)
	}
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-n.exited:
			return fmt.Errorf("nats-server %s exited at start: %s", n.name, n.tail())
		default:
		}
		if n.readPorts(cmd.Process.Pid) {
			if c, err := net.DialTimeout("tcp", strings.TrimPrefix(n.client, "nats://"), time.Second); err == nil {
				_ = c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			n.kill()
			return fmt.Errorf("nats-server %s not ready after %s: %s", n.name, wait, n.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPorts reads the ports file the server writes once it listens.
func (n *node) readPorts(pid int) bool {
	b, err := os.ReadFile(filepath.Join(n.dir, fmt.Sprintf("%s_%d.ports", filepath.Base(n.bin), pid)))
	if err != nil {
		return false
	}
	var ports struct {
		Nats []string `json:"nats"`
	}
	if json.Unmarshal(b, &ports) != nil || len(ports.Nats) == 0 {
		return false
	}
	n.client = ports.Nats[0]
	return true
}

// port is the client port the server listens on.
func (n *node) port() int {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(n.client, "nats://"))
	var port int
	_, _ = fmt.Sscan(p, &port)
	return port
}

// stop ends the process as an operator's restart does (SIGTERM: the
// server flushes its store), or with SIGKILL after 15 s.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		n.kill()
	}
}

// kill ends the process with SIGKILL, as an OOM kill or a power cut does.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// tail is the end of the server's log, for an error.
func (n *node) tail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "nats.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// StartConfigFile starts nats-server with the configuration file conf, as
// it is (a shipped configuration): conf must listen on port -1 and set
// ports_file_dir to its own folder, where the server's log goes too. It
// returns the client URL and the server's process ID; the server is
// stopped when the test ends.
func StartConfigFile(t testing.TB, conf string) (url string, pid int) {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	n := &node{name: filepath.Base(conf), dir: filepath.Dir(conf), conf: conf, bin: bin}
	if err := n.start(readyWait); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(n.stop)
	return n.client, n.cmd.Process.Pid
}
