package bus

// DirectGetTimeout lets tests shorten one direct get's wait.
var DirectGetTimeout = &directGetTimeout
