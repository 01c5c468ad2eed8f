package notify

var RetryWait = retryWait
