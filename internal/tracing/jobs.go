package tracing

import (
	"context"
	"errors"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// JobMiddleware traces the River client's jobs, for its Config.Middleware: a span per insert and per
// work, named by the job's kind, the work's span linked to the span that enqueued the job. A failed
// job's span says that it failed, not its error's text (River keeps that in the job's row). Its
// metrics go nowhere: the service's metrics are Prometheus's. Nil when off.
func (t *Tracing) JobMiddleware() []rivertype.Middleware {
	if t == nil {
		return nil
	}
	return []rivertype.Middleware{jobSpans{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              t.provider,
		MeterProvider:               metricnoop.NewMeterProvider(),
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
	})}}
}

// jobSpans is otelriver's middleware, its inserts as they are, its work shown only what kind of
// failure a job had.
type jobSpans struct{ *otelriver.Middleware }

// errJobFailed stands for a job's error in its span.
var errJobFailed = errors.New("job failed; its error is in the job's row")

// Work hands River the job's own error, and the span its kind alone: a snooze as it is (its text is
// its duration), a cancellation as a cancellation, anything else as errJobFailed.
func (j jobSpans) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var err error
	_ = j.Middleware.Work(ctx, job, func(ctx context.Context) error {
		err = doInner(ctx)
		var snooze *river.JobSnoozeError
		var cancel *river.JobCancelError
		switch {
		case err == nil, errors.As(err, &snooze):
			return err
		case errors.As(err, &cancel):
			return river.JobCancel(errJobFailed)
		}
		return errJobFailed
	})
	return err
}
