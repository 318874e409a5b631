package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func kubeInputs(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	pools, err := workerPools()
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := secretNames()
	if err != nil {
		t.Fatal(err)
	}
	return pools, secrets
}

// TestKubernetesManifests decodes every manifest of deploy/k8s strictly
// into the Kubernetes API types (apps/v1, batch/v1, core/v1,
// networking/v1; KEDA's ScaledObject into its documented fields): no
// unknown or misspelt field, no value of the wrong type, no key twice.
// Then the safe defaults: the namespace enforces the restricted pod
// security standard; every container of every workload runs as a
// non-root user with a seccomp profile, no privilege escalation, a
// read-only root, no capability, CPU and memory requests and limits, no
// API token; long-running ones answer liveness and readiness probes,
// NATS's on its monitoring endpoint; NATS routes authenticate and NATS
// refuses to start on a missing password; the secret ships no value and
// every key read is one gen-secrets.sh writes; each pool of accounts.conf
// has a worker Deployment under its user, inbox and skills, with the
// skills volume and a /tmp, scaled by a ScaledObject on exactly its
// skills' consumers; the console runs as its own user behind a ClusterIP
// Service; a NetworkPolicy fences NATS.
func TestKubernetesManifests(t *testing.T) {
	pools, secrets := kubeInputs(t)
	m, err := loadManifests(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, prob := range checkManifests(m, pools, secrets) {
		t.Error(prob)
	}
	t.Logf("%d Deployments, %d StatefulSets, %d Jobs, %d Services, %d ScaledObjects", len(m.deployments), len(m.statefulSets), len(m.jobs),
		len(m.services), len(m.scaled))
}

// TestKubernetesChecksCatchBreakage breaks one manifest once for each
// check and watches the strict decode or the checks refuse it.
func TestKubernetesChecksCatchBreakage(t *testing.T) {
	pools, secrets := kubeInputs(t)
	for _, tc := range []struct {
		name, file, from, to, want string
	}{
		{"an unknown field", "scheduler.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: true\n            runAsNonRoute: true", `unknown field "runAsNonRoute"`},
		{"a misspelt field", "console.yaml", "livenessProbe:", "livenesProbe:", `unknown field "livenesProbe"`},
		{"a field twice", "narrator.yaml", "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", "already set"},
		{"a wrong type", "worker-art.yaml", "replicas: 1", "replicas: one", "replicas"},
		{"a bad quantity", "nats.yaml", "limits: { cpu: \"2\", memory: 2Gi }", "limits: { cpu: \"2\", memory: 2 gigs }", "quantities must match"},
		{"a KEDA field misspelt", "keda-scaledobject.yaml", "maxReplicaCount: 5", "maxReplicas: 5", `unknown field "maxReplicas"`},
		{"a KEDA metadata key misspelt", "keda-scaledobject.yaml", `lagThreshold: "10"`, `lagTreshold: "10"`, `"lagTreshold"`},
		{"a kind this deployment does not use", "skills.yaml", "kind: PersistentVolumeClaim", "kind: PersistentVolume", "not one this check knows"},
		{"no restricted namespace", "namespace.yaml", "pod-security.kubernetes.io/enforce: restricted", "pod-security.kubernetes.io/enforce: baseline", "restricted pod security"},
		{"root allowed", "provision-job.yaml", "runAsNonRoot: true", "runAsNonRoot: false", "may run as root"},
		{"uid 0", "narrator.yaml", "runAsUser: 10001", "runAsUser: 0", "unprivileged runAsUser"},
		{"no seccomp", "console.yaml", "seccompProfile: { type: RuntimeDefault }", "seccompProfile: { type: Unconfined }", "seccomp"},
		{"privilege escalation", "worker-story.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "may gain privileges"},
		{"a writable root", "nats.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "writable root"},
		{"a capability kept", "scheduler.yaml", "capabilities: { drop: [ALL] }", "capabilities: { drop: [ALL], add: [NET_ADMIN] }", "keeps capabilities"},
		{"no memory limit", "scheduler.yaml", `limits: { cpu: "1", memory: 512Mi }`, `limits: { cpu: "1" }`, "no memory limit"},
		{"no requests", "console.yaml", "requests: { cpu: 50m, memory: 64Mi }\n", "", "requests no cpu"},
		{"an API token", "provision-job.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true", "API token"},
		{"no readiness probe", "narrator.yaml", "          readinessProbe: { httpGet: { path: /readyz, port: 9092 }, periodSeconds: 5 }\n", "", "no liveness and readiness"},
		{"NATS probed elsewhere", "nats.yaml", `readinessProbe: { httpGet: { path: "/healthz?js-server-only=true", port: 8222 }`, "readinessProbe: { httpGet: { path: /varz, port: 8222 }", "monitoring endpoint"},
		{"NATS without its startup probe", "nats.yaml", "          startupProbe: { httpGet: { path: /healthz, port: 8222 }, periodSeconds: 10, failureThreshold: 90 }\n", "", "monitoring endpoint"},
		{"a route without the password", "nats.yaml", "nats-route://route:$(ROUTE_PASSWORD)@nats-1", "nats-route://nats-1", "NATS_ROUTE_2"},
		{"a password not checked", "nats.yaml", "OPERATOR_PASSWORD SYS_PASSWORD", "SYS_PASSWORD", "OPERATOR_PASSWORD is set"},
		{"a default password", "secrets.yaml", "type: Opaque", "type: Opaque\nstringData:\n  GAME_PASSWORD: change-me-game", "ships values"},
		{"the old shared worker key", "worker-story.yaml", "key: WORKER_STORY_PASSWORD", "key: SKILLWORKER_PASSWORD", "SKILLWORKER_PASSWORD"},
		{"the old shared worker user", "worker-story.yaml", "value: worker_story", "value: skillworker", "not as a worker pool"},
		{"another pool's inbox", "worker-art.yaml", "value: _INBOX_worker_art", "value: _INBOX_worker_story", "inbox prefix"},
		{"a skill beyond the pool", "worker-art.yaml", `"--skills", "scene-art"`, `"--skills", "scene-art,memory"`, "is scoped to"},
		{"skills baked in", "worker-story.yaml", "            - { name: skills, mountPath: /skills }\n", "", "no skills volume"},
		{"no /tmp", "worker-art.yaml", "            - { name: tmp, mountPath: /tmp }\n", "", "emptyDir at /tmp"},
		{"a pool without workers", "worker-art.yaml", "args: [\"skillworker\"", "args: [\"narrator\"", "pool art"},
		{"a pool not scaled", "keda-scaledobject.yaml", "scaleTargetRef: { name: worker-art }", "scaleTargetRef: { name: worker-arts }", "no worker Deployment"},
		{"a skill not scaled", "keda-scaledobject.yaml", "        consumer: \"skill-memory\"\n", "        consumer: \"skill-memories\"\n", "watches the consumers"},
		{"the console as operator", "console.yaml", "value: console }", "value: operator }", "operator"},
		{"the console published", "console.yaml", "type: ClusterIP", "type: LoadBalancer", "plain HTTP"},
		{"an unknown kind", "nats.yaml", "kind: NetworkPolicy", "kind: NetworkPolicyX", "not one this check knows"},
		{"NATS unfenced", "nats.yaml", "  podSelector: { matchLabels: { app: nats } }\n  policyTypes", "  podSelector: { matchLabels: { app: natz } }\n  policyTypes", "no NetworkPolicy fences"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(deployDir, k8sDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tc.from) {
				t.Fatalf("%s has no %q to break", tc.file, tc.from)
			}
			broken := strings.Replace(string(data), tc.from, tc.to, 1)
			var probs []string
			m, err := loadManifests(map[string][]byte{tc.file: []byte(broken)})
			if err != nil {
				probs = []string{err.Error()}
			} else {
				probs = checkManifests(m, pools, secrets)
			}
			for _, prob := range probs {
				if strings.Contains(prob, tc.want) {
					t.Logf("caught: %s", prob)
					return
				}
			}
			t.Errorf("not caught (want a problem with %q): %v", tc.want, probs)
		})
	}
}
