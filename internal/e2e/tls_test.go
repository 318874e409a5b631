package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/cli"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// pki is a CA and the certificates it signed, as PEM files.
type pki struct {
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	CA   string // the CA certificate file
	next int64
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	p := &pki{dir: testlog.OpenTempDir(t), ca: ca, key: key, next: 2}
	p.CA = p.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.dir, name)
	require.NoError(t, os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return f
}

// issue signs a certificate for a server (127.0.0.1) or a client and
// returns its certificate and key files.
func (p *pki) issue(t *testing.T, name string, server bool) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.next), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	p.next++
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

// TestTLS: the shipped accounts on a server that requires TLS and a client
// certificate signed by its CA (mutual TLS). The pipeline and the CLI
// connect with their certificates; a client without TLS, one that does not
// trust the CA, and one whose certificate another CA signed are refused.
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	ca := newPKI(t, "narratoria")
	srvCert, srvKey := ca.issue(t, "server", true)
	s := startSecured(t, func(o *server.Options) {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: ca.CA, Verify: true})
		require.NoError(t, err)
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
	})
	s.url = strings.Replace(s.url, "nats://", "tls://", 1)
	cliCert, cliKey := ca.issue(t, "component", false)
	s.tls = func(c *bus.Config) { c.TLSCA, c.TLSCert, c.TLSKey = ca.CA, cliCert, cliKey }

	log, _ := testlog.New(t)
	s.provision(t)
	_, sch, _ := s.pipeline(t, log)
	require.NoError(t, sch.Ready())
	c, err := client.New(s.connect(t, "game", nil))
	require.NoError(t, err)
	n, err := c.Narrate(t.Context(), messages.Prompt{SessionID: "tls", Text: "hello over TLS"})
	require.NoError(t, err)
	require.Contains(t, n.Text, "An echo answers.")

	var out, errb strings.Builder
	code := cli.Main([]string{"plan", "ls", "--nats-url", s.url, "--user", "game", "--password", "pw-game", "--inbox-prefix", "_INBOX_game",
		"--tls-ca", ca.CA, "--tls-cert", cliCert, "--tls-key", cliKey}, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	require.Equal(t, 0, code, errb.String())

	refused := func(c bus.Config) error {
		c.URL, c.User, c.Password = s.url, "operator", "pw-operator"
		nc, err := bus.Connect(t.Context(), c, log)
		if err == nil {
			nc.Close()
		}
		return err
	}
	require.Error(t, refused(bus.Config{}), "no TLS")
	require.Error(t, refused(bus.Config{TLSCert: cliCert, TLSKey: cliKey}), "the server's CA not trusted")
	require.Error(t, refused(bus.Config{TLSCA: ca.CA}), "mutual TLS: no client certificate")
	other := newPKI(t, "other")
	otherCert, otherKey := other.issue(t, "intruder", false)
	require.Error(t, refused(bus.Config{TLSCA: ca.CA, TLSCert: otherCert, TLSKey: otherKey}), "a certificate of another CA")
}
