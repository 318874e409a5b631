package console

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// pageCSP is the Content Security Policy of every response but an
// asset's: the page runs only its own script file and styles (ui/ has no
// inline script, style or handler), talks only to its own origin, and no
// other site may frame it (clickjacking).
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// assetCSP is an asset's policy: a picture shows, and an SVG opened on its
// own runs nothing in the console's origin (sandbox).
const assetCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox; frame-ancestors 'none'"

// secureHeaders sets the headers every response carries, whatever answers
// it (the page, the API, a refusal of the host or origin checks): the
// Content Security Policy, no framing (frame-ancestors and the older
// X-Frame-Options), no content sniffing, and no Referer sent onwards (a
// plan or session ID in the URL stays in the console).
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", pageCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// PlainHTTPWarning is the warning for a console that serves plain HTTP on
// addr (the address it listens on): passwords and session cookies cross
// the network in the clear to anyone between the browser and the console.
// It is "" for a loopback address, where only this host reaches it (a
// reverse proxy on the same host terminating TLS, or a local user).
func PlainHTTPWarning(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	what := "address " + host
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		what = "every interface"
	}
	return fmt.Sprintf("console: serving plain HTTP on %s (%s): passwords, tokens and session cookies cross the network unencrypted. "+
		"Give console.tlsCert and console.tlsKey (narratoria console --https-cert/--https-key), or listen on 127.0.0.1 behind a reverse proxy "+
		"that terminates TLS (deploy/README.md)", addr, what)
}
