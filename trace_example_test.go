package vigil_test

import (
	"context"
	"log"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/store/memstore"
)

// A runtime that sends its spans over OTLP/HTTP (the exporter reads the
// OTEL_EXPORTER_OTLP_* variables). The provider uses vigil's ID generator,
// so a run that crosses a restart stays one span under its parent.
func ExampleTraceIDGenerator() {
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithIDGenerator(vigil.TraceIDGenerator()))
	defer tp.Shutdown(ctx) // after the runtime closed: flushes the last spans
	rt, err := vigil.Open(ctx, vigil.Options{Store: memstore.New(), TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
}
