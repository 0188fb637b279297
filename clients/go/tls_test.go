// TLS: a CA bundle and a client certificate from PEM files, against the
// gateway behind a TLS endpoint that requires a client certificate (HTTP/2
// by ALPN, as the gateway serves TLS).

package lockgate_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockgate"
)

// certificate is a key pair signed by parent (self-signed when nil).
type certificate struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func issue(t *testing.T, template *x509.Certificate, parent *certificate) *certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(time.Hour)
	signer, signerKey := template, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &certificate{cert: cert, key: key, der: der}
}

// writePEM writes the certificate and, if keyPath is set, its key.
func (c *certificate) writePEM(t *testing.T, certPath, keyPath string) {
	t.Helper()
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if keyPath == "" {
		return
	}
	der, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSWithACABundleAndAClientCertificate(t *testing.T) {
	_, gateway := sharedStack(t)
	dir := t.TempDir()
	ca := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil)
	server := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "gateway"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca)
	client := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "ops.internal"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca)
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	ca.writePEM(t, caFile, "")
	client.writePEM(t, certFile, keyFile)

	// The TLS endpoint: requires a client certificate signed by the CA and
	// passes everything on to the gateway, events as they come.
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.cert)
	upstream, _ := url.Parse(gateway.url())
	forward := httputil.NewSingleHostReverseProxy(upstream)
	forward.FlushInterval = -1
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := &http.Server{Handler: forward, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{server.der}, PrivateKey: server.key}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
	}, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = endpoint.ServeTLS(listener, "", "") }()
	t.Cleanup(func() { endpoint.Close() })
	address := "https://" + listener.Addr().String()

	cfg, err := lockgate.TLSConfigFromFiles(caFile, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	gw := lockgate.New(address, lockgate.WithTLS(cfg))
	key := uniqueKey(t)
	lock, err := gw.Lock(context.Background(), key, lockgate.TTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // renewals come through
	if lock.Err() != nil {
		t.Fatal(lock.Err())
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := holders(t, lockgate.New(gateway.url()), key); n != 0 {
		t.Fatal("still held after Release")
	}

	// Without the client certificate the handshake is refused.
	caOnly, err := lockgate.TLSConfigFromFiles(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockgate.New(address, lockgate.WithTLS(caOnly)).TryLock(context.Background(), key)
	if !errors.Is(err, lockgate.ErrUnavailable) {
		t.Fatalf("without a client certificate: %v", err)
	}
	// Without the CA the gateway's certificate is not trusted.
	_, err = lockgate.New(address).TryLock(context.Background(), key)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("without the CA bundle: %v", err)
	}
	if _, err := lockgate.TLSConfigFromFiles(filepath.Join(dir, "client-key.pem"), "", ""); err == nil {
		t.Fatal("a key file was taken for a CA bundle")
	}
}

// gatewayServesTLS reports whether the gateway binary has `serve --tls-cert`.
func gatewayServesTLS(t *testing.T) bool {
	t.Helper()
	usage, err := exec.Command(gatewayBinary(), "serve", "--help").Output()
	if err != nil {
		t.Fatalf("lockgate serve --help: %v", err)
	}
	return strings.Contains(string(usage), "--tls-cert")
}

// The gateway's own TLS (`serve --tls-cert`, requiring client certificates
// with `--tls-client-ca`), with WithTLS: a lock, several at once, and the
// handshake refused without a client certificate.
func TestTheGatewaysOwnTLSWithAClientCertificate(t *testing.T) {
	if !gatewayServesTLS(t) {
		t.Skip("the gateway binary has no `serve --tls-cert`")
	}
	dir := t.TempDir()
	ca := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil)
	server := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca)
	client := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "ops.internal"}, DNSNames: []string{"ops.internal"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca)
	path := func(name string) string { return filepath.Join(dir, name) }
	ca.writePEM(t, path("ca.pem"), "")
	server.writePEM(t, path("server.pem"), path("server-key.pem"))
	client.writePEM(t, path("client.pem"), path("client-key.pem"))

	gateway := ownGateway(t, ownRedis(t), "--tls-cert", path("server.pem"), "--tls-key", path("server-key.pem"),
		"--tls-client-ca", path("ca.pem"))
	address := "https://" + gateway.addr
	cfg, err := lockgate.TLSConfigFromFiles(path("ca.pem"), path("client.pem"), path("client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	gw := lockgate.New(address, lockgate.WithTLS(cfg))
	ctx := context.Background()
	key := uniqueKey(t)
	lock, err := gw.Lock(ctx, key, lockgate.TTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // renewals come through
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	set, err := gw.LockAll(ctx, lockgate.Keys(key+":a", key+":b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}

	caOnly, err := lockgate.TLSConfigFromFiles(path("ca.pem"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockgate.New(address, lockgate.WithTLS(caOnly)).TryLock(ctx, key); !errors.Is(err, lockgate.ErrUnavailable) {
		t.Fatalf("without a client certificate: %v", err)
	}
}
