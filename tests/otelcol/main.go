// otelcol-probe: a minimal OTLP profiles sink built from the OpenTelemetry
// Collector's otlpreceiver. Every export request the receiver accepts is
// written to -out as one line of pprofile JSON (flushed and fsynced).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"
)

// httpToCode maps the HTTP status requested with -status to the gRPC code that
// the otlpreceiver turns back into that HTTP status.
var httpToCode = map[int]codes.Code{
	400: codes.InvalidArgument,
	401: codes.Unauthenticated,
	403: codes.PermissionDenied,
	404: codes.Unimplemented,
	429: codes.ResourceExhausted,
	500: codes.Internal,
	503: codes.Unavailable,
}

func main() {
	httpAddr := flag.String("http", "127.0.0.1:4318", "OTLP/HTTP listen address (empty: disabled)")
	grpcAddr := flag.String("grpc", "", "OTLP/gRPC listen address (empty: disabled)")
	outPath := flag.String("out", "profiles.jsonl", "file to append one JSON line per received request")
	failStatus := flag.Int("status", 0, "if set, answer requests with this HTTP status (400,401,403,404,429,500,503); the request is still recorded")
	failTimes := flag.Int("status-times", 0, "apply -status to only the first N requests (0: all)")
	retryAfter := flag.Int("retry-after", 0, "with -status 429/503: Retry-After seconds to send")
	verbose := flag.Bool("v", false, "log receiver messages to stderr")
	flag.Parse()

	failCode, ok := httpToCode[*failStatus]
	if *failStatus != 0 && !ok {
		fmt.Fprintf(os.Stderr, "unsupported -status %d\n", *failStatus)
		os.Exit(2)
	}
	if *httpAddr == "" && *grpcAddr == "" {
		fmt.Fprintln(os.Stderr, "need -http and/or -grpc")
		os.Exit(2)
	}

	out, err := os.OpenFile(*outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open -out:", err)
		os.Exit(1)
	}

	var mu sync.Mutex
	requests := 0
	marshaler := &pprofile.JSONMarshaler{}
	next, err := xconsumer.NewProfiles(func(_ context.Context, pd pprofile.Profiles) error {
		line, err := marshaler.MarshalProfiles(pd)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		mu.Lock()
		defer mu.Unlock()
		requests++
		if _, err = out.Write(append(line, '\n')); err == nil {
			err = out.Sync()
		}
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if *failStatus != 0 && (*failTimes == 0 || requests <= *failTimes) {
			st := status.New(failCode, fmt.Sprintf("otelcol-probe: -status %d", *failStatus))
			if *retryAfter > 0 {
				d := durationpb.New(time.Duration(*retryAfter) * time.Second)
				if withInfo, e := st.WithDetails(&errdetails.RetryInfo{RetryDelay: d}); e == nil {
					st = withInfo
				}
			}
			return st.Err()
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}

	factory := otlpreceiver.NewFactory().(xreceiver.Factory)
	cfg := factory.CreateDefaultConfig().(*otlpreceiver.Config)
	if *httpAddr != "" {
		cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = *httpAddr
	} else {
		cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
	}
	if *grpcAddr != "" {
		cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = *grpcAddr
	} else {
		cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	}

	// The receiver logs the address it actually bound ("Starting HTTP server",
	// endpoint=...), which lets callers pass port 0.
	obsCore, logs := observer.New(zapcore.InfoLevel)
	core := obsCore
	if *verbose {
		core = zapcore.NewTee(obsCore, zapcore.NewCore(
			zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
			zapcore.Lock(os.Stderr), zapcore.DebugLevel))
	}
	set := receivertest.NewNopSettings(factory.Type())
	set.Logger = zap.New(core)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	rcv, err := factory.CreateProfiles(ctx, set, cfg, next)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create receiver:", err)
		os.Exit(1)
	}
	if err = rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		fmt.Fprintln(os.Stderr, "start receiver:", err)
		os.Exit(1)
	}

	bound := map[string]string{}
	for _, e := range logs.All() {
		if ep, ok := e.ContextMap()["endpoint"].(string); ok {
			switch e.Message {
			case "Starting HTTP server":
				bound["http"] = ep
			case "Starting GRPC server":
				bound["grpc"] = ep
			}
		}
	}
	msg := "listening"
	for _, k := range []string{"http", "grpc"} {
		if bound[k] != "" {
			msg += " " + k + "=" + bound[k]
		}
	}
	fmt.Println(msg)
	_ = os.Stdout.Sync()

	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err = rcv.Shutdown(shutdownCtx); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "shutdown:", err)
	}
	mu.Lock()
	_ = out.Close()
	mu.Unlock()
	os.Exit(0)
}
