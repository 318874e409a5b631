package messages

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// SubjectPrefixDefault is the default first token of every subject.
const SubjectPrefixDefault = "narratoria"

// Stream and bucket names (§1). They do not change with the subject prefix.
const (
	StreamPrompts    = "NARRATORIA_PROMPTS"
	StreamNarrations = "NARRATORIA_NARRATIONS"
	StreamPlans      = "NARRATORIA_PLANS"
	StreamResults    = "NARRATORIA_RESULTS"
	StreamEvents     = "NARRATORIA_EVENTS"
	// StreamJobs is the internal work-queue stream of tool jobs.
	StreamJobs = "NARRATORIA_JOBS"
	// StreamOutcomes is the internal stream of tool outcomes.
	StreamOutcomes = "NARRATORIA_OUTCOMES"
	// StreamApprovals keeps approval decisions (§9.3) until the active
	// scheduler applies them, so one sent during a failover is not lost.
	StreamApprovals = "NARRATORIA_APPROVALS"
	// StreamAudit keeps the console's audit trail: who did what (logins,
	// approvals, denials, cancels, prompts, resets) and how it ended, on
	// <prefix>.audit.<action>, for the history window.
	StreamAudit = "NARRATORIA_AUDIT"
	// StreamAuditLogins keeps the console's refused logins, apart from the
	// actions of StreamAudit so their noise never pushes an action out:
	// one entry per source address and minute, on
	// <prefix>.logins.[<tenant>.]refused.
	StreamAuditLogins = "NARRATORIA_AUDIT_LOGINS"

	BucketSessions = "narratoria_sessions"
	BucketHealth   = "narratoria_health"
	BucketSkills   = "narratoria_skills"
	// BucketPlans is the internal bucket of in-flight plan state.
	BucketPlans = "narratoria_plans"
	// BucketKeys is the internal bucket of the schedulers' secret keys
	// (key "outcomes": the key of outcome tokens). Only schedulers may
	// read it.
	BucketKeys = "narratoria_keys"
	// BucketReuse is the internal bucket of outcomes a replan of the same
	// prompt may reuse, and of each plan's first attempt (lineage).
	BucketReuse = "narratoria_reuse"
	// BucketPrompts is the internal bucket of narrated prompt IDs (dedupe).
	BucketPrompts = "narratoria_prompts"
	// BucketAssets is the object store of the files scripts list as
	// assets, each named by its content (AssetObjectName), so a game
	// server that shares no disk with the workers can fetch them.
	BucketAssets = "narratoria_assets"
)

// AssetMaxSizeDefault is the default limit of one asset object: a worker
// stores no larger file, and a reader refuses a larger object before
// reading it (nats.assetMaxSize).
const AssetMaxSizeDefault = 16 << 20

// AssetObjectName is the object name of an asset file in BucketAssets:
// "sha256-" and the hex SHA-256 of its content. A reader checks the
// content it gets against the name, so an object overwritten by anyone
// with write access is detected, never served as the asset.
func AssetObjectName(sha256Hex string) string { return "sha256-" + sha256Hex }

// ValidToken reports whether s may be used as a session ID, tool ID or other
// single subject token: ^[A-Za-z0-9_-]{1,64}$.
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidSession reports whether s may name a session in a plan or a
// command: a token, or <tenant>.<token> with a tenant name
// (^[a-z0-9][a-z0-9-]{0,31}$) as a multi-tenant service names it.
func ValidSession(v string) bool {
	t, l, ok := strings.Cut(v, ".")
	if !ok {
		return ValidToken(v)
	}
	if len(t) == 0 || len(t) > 32 || !ValidToken(l) || t[0] == '-' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// CheckToken returns a *TokenError naming kind if s is not a valid token.
func CheckToken(kind, s string) error {
	if ValidToken(s) {
		return nil
	}
	return &TokenError{Kind: kind, Value: truncate(s, 80)}
}

// CheckPlanID returns an error wrapping ErrInvalidPlanID unless id is a UUID
// in its canonical 36-character form.
func CheckPlanID(id string) error {
	if len(id) != 36 {
		return fmt.Errorf("%w: %q must be a UUID", ErrInvalidPlanID, truncate(id, 80))
	}
	if _, err := uuid.Parse(id); err != nil {
		return fmt.Errorf("%w: %q must be a UUID", ErrInvalidPlanID, truncate(id, 80))
	}
	return nil
}

// Subjects builds every subject of §1 (and the internal ones) under a prefix.
// Builders refuse tokens that are not valid.
//
// In a multi-tenant deployment (Tenants) the service names each session
// <tenant>.<session>: two tokens, the tenant's name and the session ID the
// tenant's game server chose. Subjects that carry a session carry both
// (<prefix>.narrations.acme.s1), and subjects without one carry the tenant
// right after their kind (<prefix>.narrate.acme,
// <prefix>.approvals.acme.<plan>.<tool>): the tenant token is always the
// one after the kind, which is where the server's account imports put it
// (docs/decisions/, "Tenants"). A tenant's own clients never see it: they
// use Subjects without Tenants.
type Subjects struct {
	// Prefix is the first token; SubjectPrefixDefault when empty.
	Prefix string
	// Tenants says sessions are <tenant>.<session> (the service's side of
	// a multi-tenant deployment).
	Tenants bool
	// Tenant is the tenant of the subjects without a session (narrate,
	// approvals, control), when Tenants is set: see In and ForSession.
	Tenant Tenant
}

// In returns the subjects of one tenant's requests: s with Tenant set.
func (s Subjects) In(tenant Tenant) Subjects {
	s.Tenant = tenant
	return s
}

// ForSession returns the subjects of a session's tenant (s unchanged
// without Tenants).
func (s Subjects) ForSession(session string) Subjects {
	if s.Tenants {
		s.Tenant = TenantOf(session)
	}
	return s
}

// CheckSession returns an error unless session is a session of this
// deployment: one token, or with Tenants two (<tenant>.<session>).
func (s Subjects) CheckSession(session string) error {
	if !s.Tenants {
		return CheckToken("sessionId", session)
	}
	t, l, ok := strings.Cut(session, ".")
	if !ok || !ValidToken(t) || !ValidToken(l) {
		return &TokenError{Kind: "sessionId", Value: truncate(session, 80), Tenant: true}
	}
	return nil
}

// SessionTokens is how many subject tokens a session takes: 1, or 2
// with Tenants.
func (s Subjects) SessionTokens() int {
	if s.Tenants {
		return 2
	}
	return 1
}

// SessionAt returns the session in subject that starts at token from
// (counting from 0), or "" when it has not enough tokens or the session is
// not valid.
func (s Subjects) SessionAt(subject string, from int) string {
	toks := strings.Split(subject, ".")
	n := s.SessionTokens()
	if from < 0 || from+n > len(toks) {
		return ""
	}
	session := strings.Join(toks[from:from+n], ".")
	if s.CheckSession(session) != nil {
		return ""
	}
	return session
}

// KindToken is the index of the kind token of this deployment's subjects
// (the prefix may itself be several tokens).
func (s Subjects) KindToken() int { return strings.Count(s.p(), ".") + 1 }

// tenantToken is "" or "." + Tenant: the tenant after the kind of a
// subject without a session.
func (s Subjects) tenantToken() string {
	if s.Tenants && s.Tenant != "" {
		return "." + string(s.Tenant)
	}
	return ""
}

// Root is the prefix subjects start with (SubjectPrefixDefault when
// Prefix is empty), for building wildcard subscriptions.
func (s Subjects) Root() string { return s.p() }

func (s Subjects) p() string {
	if s.Prefix == "" {
		return SubjectPrefixDefault
	}
	return s.Prefix
}

// Prompts is <prefix>.prompts.<session>.
func (s Subjects) Prompts(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".prompts." + session, nil
}

// Narrate is the request/reply subject <prefix>.narrate.
// With Tenants it is <prefix>.narrate.<tenant>.
func (s Subjects) Narrate() string { return s.p() + ".narrate" + s.tenantToken() }

// Narrations is <prefix>.narrations.<session>.
func (s Subjects) Narrations(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".narrations." + session, nil
}

// Plans is <prefix>.plans.<session>.
func (s Subjects) Plans(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".plans." + session, nil
}

// Results is <prefix>.results.<session>.<plan>.
func (s Subjects) Results(session, plan string) (string, error) {
	return s.sessionPlan("results", session, plan)
}

// Progress is <prefix>.progress.<session>.<plan>.
func (s Subjects) Progress(session, plan string) (string, error) {
	return s.sessionPlan("progress", session, plan)
}

// Events is <prefix>.events.<session>.<plan>.<tool>.
func (s Subjects) Events(session, plan, tool string) (string, error) {
	base, err := s.sessionPlan("events", session, plan)
	if err != nil {
		return "", err
	}
	if err := CheckToken("toolId", tool); err != nil {
		return "", err
	}
	return base + "." + tool, nil
}

// Health is <prefix>.health.<session>.<skill>.
func (s Subjects) Health(session, skill string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	if err := CheckToken("skill", skill); err != nil {
		return "", err
	}
	return s.p() + ".health." + session + "." + skill, nil
}

// Approvals is <prefix>.approvals.<plan>.<tool> (with Tenants,
// <prefix>.approvals.<tenant>.<plan>.<tool>).
func (s Subjects) Approvals(plan, tool string) (string, error) {
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	if err := CheckToken("toolId", tool); err != nil {
		return "", err
	}
	return s.p() + ".approvals" + s.tenantToken() + "." + plan + "." + tool, nil
}

// Decisions is <prefix>.decisions.<plan>.<tool>, where the scheduler
// stores the last decision on a plan's tool in StreamApprovals, once it
// checked it (the plan in flight and the publisher's, the tool one that
// waits for approval): the stream takes no client's publish.
func (s Subjects) Decisions(plan, tool string) (string, error) {
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	if err := CheckToken("toolId", tool); err != nil {
		return "", err
	}
	return s.p() + ".decisions." + plan + "." + tool, nil
}

// SessionReset is <prefix>.sessions.<session>.reset.
func (s Subjects) SessionReset(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".sessions." + session + ".reset", nil
}

// State is the subject of a tenant's session state in its state stream
// (StateStream): <prefix>.state.<tenant>.<session>, for a session
// <tenant>.<session> of a multi-tenant deployment.
func (s Subjects) State(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	if TenantOf(session) == "" {
		return "", fmt.Errorf("session %q has no tenant: its state is in %s", session, BucketSessions)
	}
	return s.p() + ".state." + session, nil
}

// Jobs is the filter of a skill's work queue, <prefix>.jobs.<skill>.>:
// every job of the skill.
func (s Subjects) Jobs(skill string) (string, error) {
	if err := CheckToken("skill", skill); err != nil {
		return "", err
	}
	return s.p() + ".jobs." + skill + ".>", nil
}

// Job is the internal work-queue subject of one tool's jobs,
// <prefix>.jobs.<skill>.<plan>.<tool>: one subject per tool lets a new
// scheduler find out whether an attempt's job is stored.
func (s Subjects) Job(skill, plan, tool string) (string, error) {
	if err := CheckToken("skill", skill); err != nil {
		return "", err
	}
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	if err := CheckToken("toolId", tool); err != nil {
		return "", err
	}
	return s.p() + ".jobs." + skill + "." + plan + "." + tool, nil
}

// Outcomes is the internal subject <prefix>.outcomes.<session>.<plan>.<tool>.
func (s Subjects) Outcomes(session, plan, tool string) (string, error) {
	base, err := s.sessionPlan("outcomes", session, plan)
	if err != nil {
		return "", err
	}
	if err := CheckToken("toolId", tool); err != nil {
		return "", err
	}
	return base + "." + tool, nil
}

// Cancel is the internal subject <prefix>.cancel.<plan>: workers kill the
// running scripts of a cancelled plan.
func (s Subjects) Cancel(plan string) (string, error) {
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	return s.p() + ".cancel." + plan, nil
}

// PlanStatusSubject is the request/reply subject
// <prefix>.control.status.<plan>: the status of a plan in flight (§9.4).
func (s Subjects) PlanStatusSubject(plan string) (string, error) {
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	return s.p() + ".control" + s.tenantToken() + ".status." + plan, nil
}

// PlanCancelSubject is the request/reply subject
// <prefix>.control.cancel.<plan>: cancel a plan in flight (§9.4).
func (s Subjects) PlanCancelSubject(plan string) (string, error) {
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	return s.p() + ".control" + s.tenantToken() + ".cancel." + plan, nil
}

// PlanListSubject is the request/reply subject <prefix>.control.list: the
// plans in flight (§9.4).
func (s Subjects) PlanListSubject() string { return s.p() + ".control" + s.tenantToken() + ".list" }

// ApprovalCheckSubject is the request/reply subject
// <prefix>.control.approval.<plan>.<tool>: can a decision on the tool be
// taken now (§9.3)? The reply names why not (ControlReply.Code).
func (s Subjects) ApprovalCheckSubject(plan, tool string) (string, error) {
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	if err := CheckToken("toolId", tool); err != nil {
		return "", err
	}
	return s.p() + ".control" + s.tenantToken() + ".approval." + plan + "." + tool, nil
}

// HistorySubject is the request/reply subject <prefix>.control.history:
// a page of finished plans (HistoryRequest, HistoryPage).
func (s Subjects) HistorySubject() string { return s.p() + ".control" + s.tenantToken() + ".history" }

// SkillsSubject is the request/reply subject <prefix>.control.skills: the
// registered skills (SkillsRequest, SkillSummary).
func (s Subjects) SkillsSubject() string { return s.p() + ".control" + s.tenantToken() + ".skills" }

// Context is the request/reply subject <prefix>.context.<session>: a
// running plan asks a planner for more steps (§9.1).
func (s Subjects) Context(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".context." + session, nil
}

// All returns the wildcard <prefix>.<kind>.> for a kind such as "events".
func (s Subjects) All(kind string) string { return s.p() + "." + kind + ".>" }

// Unaddressed is the last token of the results subject on which the
// scheduler reports a plan it cannot address: one without a usable
// requestId (narratoria.results.<session>.unaddressed).
const Unaddressed = "unaddressed"

// UnaddressedResults is the subject of the results of a session's plans
// that had no usable requestId.
func (s Subjects) UnaddressedResults(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".results." + session + "." + Unaddressed, nil
}

func (s Subjects) sessionPlan(kind, session, plan string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	if err := CheckPlanID(plan); err != nil {
		return "", err
	}
	return s.p() + "." + kind + "." + session + "." + plan, nil
}

// BucketOwners is the internal bucket of partition leases and instance
// heartbeats (docs/spec.md §10 "Scale"): <group>.p.<n> and <group>.m.<id>.
const BucketOwners = "narratoria_owners"

// PartitionOf returns the partition of a session among count: the FNV-1a
// hash of the session ID modulo count, which is exactly what the
// {{partition(count,1)}} subject transform of the partitioned streams
// computes, so a stored subject's partition token is PartitionOf(session).
//
// A tenant's session <tenant>.<session> is hashed as the server hashes two
// tokens, {{partition(count,1,2)}}: their bytes without the dot.
func PartitionOf(session string, count int) int {
	h := uint32(2166136261)
	for i := 0; i < len(session); i++ {
		if session[i] == '.' {
			continue
		}
		h ^= uint32(session[i])
		h *= 16777619
	}
	return int(h % uint32(count))
}

// Partitioned streams (prompts, plans, outcomes) store each message under
// its subject with the session's partition inserted after the kind:
// <prefix>.plans.<session> is stored as <prefix>.plans.<partition>.<session>.
// Publishers never see this; readers of a stream by subject do.

// Stored returns the subject a message published on subject is stored
// under in a partitioned stream: the partition inserted after the kind.
func (s Subjects) Stored(subject, session string, count int) string {
	kindEnd := len(s.p()) + 1
	for kindEnd < len(subject) && subject[kindEnd] != '.' {
		kindEnd++
	}
	return fmt.Sprintf("%s.%d%s", subject[:kindEnd], PartitionOf(session, count), subject[kindEnd:])
}

// PartitionFilter is the filter of one partition of a partitioned kind:
// <prefix>.<kind>.<partition>.>.
func (s Subjects) PartitionFilter(kind string, partition int) string {
	return fmt.Sprintf("%s.%s.%d.>", s.p(), kind, partition)
}

// JobsFence is the subject in NARRATORIA_JOBS where the scheduler owning a
// partition raises the fence its jobs are stamped with:
// <prefix>.jobs._fence.<partition> ("_fence" is no skill name, so no
// worker consumes it).
func (s Subjects) JobsFence(partition int) string {
	return fmt.Sprintf("%s.jobs._fence.%d", s.p(), partition)
}

// NarratorFence is the subject in NARRATORIA_PLANS where the narrator
// owning a partition raises its fence: <prefix>.fence.narrator.<partition>.
func (s Subjects) NarratorFence(partition int) string {
	return fmt.Sprintf("%s.fence.narrator.%d", s.p(), partition)
}
