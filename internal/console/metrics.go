package console

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the console's Prometheus collectors. Each carries the
// console's tenant as a constant label ("" for the service's own), so the
// consoles `narratoria up --tenants` serves in one process register side
// by side; the other labels have small fixed sets of values.
type metrics struct {
	// throttled counts logins refused before their password was checked,
	// by what was throttled (account or address).
	throttled *prometheus.CounterVec
	// passwordChecks counts password checks made (bcrypt comparisons).
	passwordChecks prometheus.Counter
	// loginEntries counts the aggregated entries of refused logins written
	// to the audit trail, by result (stored, failed).
	loginEntries *prometheus.CounterVec
	// refusedLogins counts the refused logins those entries stand for, by
	// outcome (refused: wrong name or password; throttled).
	refusedLogins *prometheus.CounterVec
	// assetAborts counts asset responses cut off after they started, by
	// reason (changed: the content is not its name's; too_large; read:
	// the store failed mid-object).
	assetAborts *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, tenant string) *metrics {
	cl := prometheus.Labels{"tenant": tenant}
	m := &metrics{
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_console_logins_throttled_total", ConstLabels: cl,
			Help: "Password logins refused before their password was checked, by what was throttled (account: the name tried; address: the source address).",
		}, []string{"scope"}),
		passwordChecks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_console_password_checks_total", ConstLabels: cl,
			Help: "Passwords checked against their bcrypt hash (logins the throttle let through).",
		}),
		loginEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_console_login_audit_entries_total", ConstLabels: cl,
			Help: "Aggregated audit entries of refused logins (one per source address and minute), by result (stored, failed).",
		}, []string{"result"}),
		refusedLogins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_console_logins_refused_total", ConstLabels: cl,
			Help: "Refused password logins, by outcome (refused: wrong name or password; throttled: not checked).",
		}, []string{"outcome"}),
		assetAborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_console_asset_streams_aborted_total", ConstLabels: cl,
			Help: "Asset responses cut off after they started, by reason (changed: the content does not hash to its name; too_large; read: the store failed mid-object).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.throttled, m.passwordChecks, m.loginEntries, m.refusedLogins, m.assetAborts)
	}
	return m
}
