package check

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// k8sDir holds the Kubernetes manifests, in deploy/.
const k8sDir = "k8s"

// scaledObject is KEDA's ScaledObject (keda.sh/v1alpha1), the fields of
// its spec the KEDA documentation lists, so that a strict decode refuses
// a misspelt one. KEDA's own Go types pull in a controller framework,
// which this module does without; its triggers' metadata keys are
// checked against the nats-jetstream scaler's (kedaNATSKeys).
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Triggers              []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			MetricType        string            `json:"metricType,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// kedaNATSKeys are the metadata keys of KEDA's nats-jetstream scaler.
var kedaNATSKeys = []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold", "activationLagThreshold", "useHttps"}

// manifests are the objects of the Kubernetes manifests, decoded.
type manifests struct {
	namespaces   []corev1.Namespace
	secrets      []corev1.Secret
	configMaps   []corev1.ConfigMap
	services     []corev1.Service
	claims       []corev1.PersistentVolumeClaim
	deployments  []appsv1.Deployment
	statefulSets []appsv1.StatefulSet
	jobs         []batchv1.Job
	policies     []networkingv1.NetworkPolicy
	scaled       []scaledObject
}

// docSplit separates the documents of a YAML stream.
var docSplit = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeManifest decodes every document of one file strictly into the
// Kubernetes API type its apiVersion and kind name: a field the type
// does not have, a value of the wrong type or a key given twice is an
// error, as is a kind this deployment does not use.
func (m *manifests) decodeManifest(name string, data []byte) error {
	for i, doc := range docSplit.Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return fmt.Errorf("%s, document %d: %w", name, i+1, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			m.namespaces = append(m.namespaces, corev1.Namespace{})
			obj = &m.namespaces[len(m.namespaces)-1]
		case "v1 Secret":
			m.secrets = append(m.secrets, corev1.Secret{})
			obj = &m.secrets[len(m.secrets)-1]
		case "v1 ConfigMap":
			m.configMaps = append(m.configMaps, corev1.ConfigMap{})
			obj = &m.configMaps[len(m.configMaps)-1]
		case "v1 Service":
			m.services = append(m.services, corev1.Service{})
			obj = &m.services[len(m.services)-1]
		case "v1 PersistentVolumeClaim":
			m.claims = append(m.claims, corev1.PersistentVolumeClaim{})
			obj = &m.claims[len(m.claims)-1]
		case "apps/v1 Deployment":
			m.deployments = append(m.deployments, appsv1.Deployment{})
			obj = &m.deployments[len(m.deployments)-1]
		case "apps/v1 StatefulSet":
			m.statefulSets = append(m.statefulSets, appsv1.StatefulSet{})
			obj = &m.statefulSets[len(m.statefulSets)-1]
		case "batch/v1 Job":
			m.jobs = append(m.jobs, batchv1.Job{})
			obj = &m.jobs[len(m.jobs)-1]
		case "networking.k8s.io/v1 NetworkPolicy":
			m.policies = append(m.policies, networkingv1.NetworkPolicy{})
			obj = &m.policies[len(m.policies)-1]
		case "keda.sh/v1alpha1 ScaledObject":
			m.scaled = append(m.scaled, scaledObject{})
			obj = &m.scaled[len(m.scaled)-1]
		default:
			return fmt.Errorf("%s, document %d: apiVersion %q kind %q is not one this check knows", name, i+1, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return fmt.Errorf("%s, document %d (%s): %w", name, i+1, tm.Kind, err)
		}
	}
	return nil
}

// loadManifests decodes every file of deploy/k8s, with replace (file
// name → content) standing in for some.
func loadManifests(replace map[string][]byte) (*manifests, error) {
	files, err := filepath.Glob(filepath.Join(deployDir, k8sDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifest in deploy/%s", k8sDir)
	}
	m := &manifests{}
	for _, f := range files {
		name := filepath.Base(f)
		data, ok := replace[name]
		if !ok {
			if data, err = os.ReadFile(f); err != nil {
				return nil, err
			}
		}
		if err := m.decodeManifest(name, data); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// podOf is a workload's pod template, by a name for the problems.
type podOf struct {
	name string
	spec corev1.PodSpec
	// job: it runs to completion (no probes).
	job bool
}

func (m *manifests) pods() []podOf {
	var out []podOf
	for _, d := range m.deployments {
		out = append(out, podOf{"Deployment " + d.Name, d.Spec.Template.Spec, false})
	}
	for _, s := range m.statefulSets {
		out = append(out, podOf{"StatefulSet " + s.Name, s.Spec.Template.Spec, false})
	}
	for _, j := range m.jobs {
		out = append(out, podOf{"Job " + j.Name, j.Spec.Template.Spec, true})
	}
	return out
}

// envValue is a container's literal environment variable ("" when unset
// or taken from elsewhere).
func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// commandOf is what a container runs: its command and args.
func commandOf(c corev1.Container) []string { return append(slices.Clone(c.Command), c.Args...) }

// checkManifests returns what the decoded manifests break of the shipped
// deployment's safe defaults, one sentence each, naming the object.
// pools are the worker pools of accounts.conf; secrets the passwords
// gen-secrets.sh writes.
func checkManifests(m *manifests, pools map[string][]string, secrets []string) []string {
	var probs []string
	bad := func(obj, format string, args ...any) {
		probs = append(probs, obj+": "+fmt.Sprintf(format, args...))
	}
	// The namespace enforces the restricted pod security standard.
	if len(m.namespaces) != 1 || m.namespaces[0].Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		probs = append(probs, "the narratoria namespace does not enforce the restricted pod security standard (label pod-security.kubernetes.io/enforce: restricted)")
	}
	// No secret ships a value.
	for _, s := range m.secrets {
		if len(s.Data)+len(s.StringData) > 0 {
			bad("Secret "+s.Name, "ships values (%d keys): the passwords come from gen-secrets.sh, never from the repository", len(s.Data)+len(s.StringData))
		}
	}
	workerDeploys := map[string]string{} // Deployment → pool
	seen := map[string]bool{}            // what the workloads run
	poolsServed := map[string]bool{}
	for _, p := range m.pods() {
		spec := p.spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			bad(p.name, "mounts a Kubernetes API token it does not need: automountServiceAccountToken: false")
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			bad(p.name, "shares the host's network, PIDs or IPC")
		}
		podSC := spec.SecurityContext
		if podSC == nil {
			podSC = &corev1.PodSecurityContext{}
		}
		containers := append(slices.Clone(spec.InitContainers), spec.Containers...)
		for i, c := range containers {
			cn := p.name + " container " + c.Name
			sc := c.SecurityContext
			if sc == nil {
				sc = &corev1.SecurityContext{}
			}
			nonRoot := sc.RunAsNonRoot
			if nonRoot == nil {
				nonRoot = podSC.RunAsNonRoot
			}
			if nonRoot == nil || !*nonRoot {
				bad(cn, "may run as root: runAsNonRoot: true")
			}
			uid := sc.RunAsUser
			if uid == nil {
				uid = podSC.RunAsUser
			}
			if uid == nil || *uid == 0 {
				bad(cn, "has no unprivileged runAsUser")
			}
			seccomp := sc.SeccompProfile
			if seccomp == nil {
				seccomp = podSC.SeccompProfile
			}
			if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
				bad(cn, "runs without a seccomp profile: seccompProfile: {type: RuntimeDefault}")
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				bad(cn, "may gain privileges: allowPrivilegeEscalation: false")
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				bad(cn, "has a writable root filesystem: readOnlyRootFilesystem: true")
			}
			if sc.Privileged != nil && *sc.Privileged {
				bad(cn, "is privileged")
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				bad(cn, "keeps capabilities: capabilities: {drop: [ALL]}, none added")
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
					bad(cn, "requests no %s", r)
				}
				if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
					bad(cn, "has no %s limit", r)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !slices.Contains(secrets, e.ValueFrom.SecretKeyRef.Key) {
					bad(cn, "reads the secret key %s, which gen-secrets.sh does not write", e.ValueFrom.SecretKeyRef.Key)
				}
			}
			if slices.Contains(commandOf(c), "--password") {
				bad(cn, "passes a password on its command line")
			}
			if i < len(spec.InitContainers) {
				continue
			}
			// Long-running containers answer probes.
			if !p.job && (c.LivenessProbe == nil || c.ReadinessProbe == nil) {
				bad(cn, "has no liveness and readiness probes")
			}
			cmd := commandOf(c)
			user := envValue(c, "NARRATORIA_NATS_USER")
			if len(cmd) > 1 && cmd[0] == "narratoria" {
				seen[cmd[1]] = true
			} else if len(cmd) > 0 {
				seen[cmd[0]] = true
			}
			switch {
			case len(cmd) > 0 && cmd[0] == "nats-server":
				for _, pr := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
					if pr == nil || pr.HTTPGet == nil || !strings.HasPrefix(pr.HTTPGet.Path, "/healthz") || pr.HTTPGet.Port.IntValue() != 8222 {
						bad(cn, "lacks a startup, liveness or readiness probe on the monitoring endpoint (/healthz on 8222)")
						break
					}
				}
				for n := 1; n <= 3; n++ {
					if v := envValue(c, fmt.Sprintf("NATS_ROUTE_%d", n)); !strings.Contains(v, "route:$(ROUTE_PASSWORD)@") {
						bad(cn, "has no authenticated route NATS_ROUTE_%d (nats-route://route:$(ROUTE_PASSWORD)@…)", n)
					}
				}
				script := ""
				for _, ic := range spec.InitContainers {
					script += strings.Join(commandOf(ic), " ")
				}
				for _, s := range secrets {
					if !strings.Contains(script, s) {
						bad(p.name, "starts NATS without checking that %s is set (an empty password lets anyone in under its user)", s)
					}
				}
			case len(cmd) > 0 && cmd[0] == "skillworker":
				pool, ok := strings.CutPrefix(user, "worker_")
				skills, known := pools[pool]
				if !ok || !known {
					bad(cn, "connects as %q, not as a worker pool of accounts.conf (worker_<pool>)", user)
					break
				}
				poolsServed[pool] = true
				workerDeploys[strings.TrimPrefix(p.name, "Deployment ")] = pool
				if got := envValue(c, "NARRATORIA_NATS_INBOXPREFIX"); got != "_INBOX_worker_"+pool {
					bad(cn, "uses the inbox prefix %q: its user may read only _INBOX_worker_%s", got, pool)
				}
				served := strings.Split(flagValue(cmd, "--skills"), ",")
				sort.Strings(served)
				if !slices.Equal(served, skills) {
					bad(cn, "serves --skills %v, but its user worker_%s is scoped to %v", served, pool, skills)
				}
				if !mountsFrom(spec, c, "/skills", func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil || v.ConfigMap != nil }) {
					bad(cn, "has no skills volume (PersistentVolumeClaim or ConfigMap) at /skills")
				}
				if !mountsFrom(spec, c, "/tmp", func(v corev1.Volume) bool { return v.EmptyDir != nil }) {
					bad(cn, "has no emptyDir at /tmp for its attempts' temporary folders")
				}
			case len(cmd) > 1 && cmd[0] == "narratoria" && cmd[1] == "console":
				if user != "console" || envValue(c, "NARRATORIA_NATS_INBOXPREFIX") != "_INBOX_console" {
					bad(cn, "connects as %q: the console has its own user, console, inbox _INBOX_console", user)
				}
			case len(cmd) > 0 && (cmd[0] == "scheduler" || cmd[0] == "narrator"):
				if user != cmd[0] {
					bad(cn, "connects as %q, not as its role %s", user, cmd[0])
				}
			}
			if user == "operator" && !p.job {
				bad(cn, "connects as the operator (every permission)")
			}
		}
	}
	for pool := range pools {
		if !poolsServed[pool] {
			probs = append(probs, fmt.Sprintf("no worker Deployment serves the pool %s of accounts.conf", pool))
		}
	}
	// Each pool is scaled by KEDA on exactly its skills' consumers.
	scaledFor := map[string]bool{}
	for _, so := range m.scaled {
		target := so.Spec.ScaleTargetRef.Name
		pool, ok := workerDeploys[target]
		if !ok {
			bad("ScaledObject "+so.Name, "scales %q, which is no worker Deployment", target)
			continue
		}
		scaledFor[target] = true
		var consumers []string
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "nats-jetstream" {
				continue
			}
			for k := range tr.Metadata {
				if !slices.Contains(kedaNATSKeys, k) {
					bad("ScaledObject "+so.Name, "has the trigger metadata %q, which the nats-jetstream scaler does not know", k)
				}
			}
			if tr.Metadata["stream"] != "NARRATORIA_JOBS" || tr.Metadata["account"] != "NARRATORIA" {
				bad("ScaledObject "+so.Name, "watches stream %q of account %q, not NARRATORIA_JOBS of NARRATORIA", tr.Metadata["stream"], tr.Metadata["account"])
			}
			consumers = append(consumers, tr.Metadata["consumer"])
		}
		var want []string
		for _, s := range pools[pool] {
			want = append(want, "skill-"+s)
		}
		sort.Strings(consumers)
		if !slices.Equal(consumers, want) {
			bad("ScaledObject "+so.Name, "watches the consumers %v, but %s serves %v", consumers, target, want)
		}
	}
	for d := range workerDeploys {
		if !scaledFor[d] {
			probs = append(probs, "no ScaledObject scales the worker Deployment "+d)
		}
	}
	// The console's plain HTTP stays inside the cluster.
	for _, s := range m.services {
		if s.Spec.Selector["app"] == "console" && s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP {
			bad("Service "+s.Name, "publishes the console's plain HTTP as %s: keep it ClusterIP behind an Ingress that ends TLS", s.Spec.Type)
		}
	}
	// NATS's monitoring and routes are fenced by a NetworkPolicy.
	if !slices.ContainsFunc(m.policies, func(np networkingv1.NetworkPolicy) bool { return np.Spec.PodSelector.MatchLabels["app"] == "nats" }) {
		probs = append(probs, "no NetworkPolicy fences the NATS pods (monitoring and routes)")
	}
	for _, c := range []string{"nats-server", "provision", "scheduler", "narrator", "skillworker", "console"} {
		if !seen[c] {
			probs = append(probs, "no workload runs "+c)
		}
	}
	return probs
}

// mountsFrom says whether container c mounts at path a volume of spec
// that ok accepts.
func mountsFrom(spec corev1.PodSpec, c corev1.Container, path string, ok func(corev1.Volume) bool) bool {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && ok(v) {
				return true
			}
		}
	}
	return false
}
