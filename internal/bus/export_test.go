package bus

// DirectGetTimeout lets tests shorten one direct get's wait.
var DirectGetTimeout = &directGetTimeout

// WatchSilence lets tests shorten how long a Mirror's watch may be silent.
var WatchSilence = &watchSilence

// UpdateBucketStream lets tests update a bucket from a stale read.
var UpdateBucketStream = updateBucketStream
