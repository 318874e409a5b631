package narrator

import "errors"

// ErrStopping is the answer to a prompt the narrator did not narrate
// because it is stopping. A stream prompt is left unacknowledged and a
// request should be retried with the same promptId: the next narrator
// resumes the prompt from its durable attempt record.
var ErrStopping = errors.New("narrator is stopping")

// ErrNoResult is what an attempt ends with when its plan's result does not
// come within the plan's timeout plus narrator.resultMargin; the attempt
// counts as failed (reason timeout) and the replan loop goes on. Any other
// failure to publish a plan or read its result ends the narration with an
// error instead, so the prompt is retried from its attempt record rather
// than spending an attempt on a NATS outage.
var ErrNoResult = errors.New("no result")
