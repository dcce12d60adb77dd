package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/pkg/profile"
	"github.com/torchd/torchd/daemon"
	_ "github.com/torchd/torchd/handlers" // registers the built-in handlers
)

func init() {
	commands["serve"] = command{"run the inference (:8080), management (:8081), metrics (:8082) and gRPC (:8001, :7070, :7071) servers", serve}
}

func serve(args []string) error {
	cfg, err := daemon.LoadConfig(args, os.Getenv)
	if err != nil {
		return err
	}
	// The level is a LevelVar so that Triton's logging API (POST /v2/logging) can change it.
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(h)
	if cfg.Profile != "" {
		mode := map[string]func(*profile.Profile){
			"cpu": profile.CPUProfile, "mem": profile.MemProfile, "block": profile.BlockProfile, "mutex": profile.MutexProfile,
		}[cfg.Profile]
		defer profile.Start(mode, profile.ProfilePath(cfg.ProfilePath), profile.NoShutdownHook, profile.Quiet).Stop()
	}
	d := daemon.New(cfg, log)
	d.UseLogLevel(level)
	if err := d.Start(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	log.Info("shutting down: draining accepted requests", "signal", s.String(), "timeout", cfg.ShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// Every extraction is gone: the lock file has nothing left to guard.
	daemon.UnlockProcess()
	log.Info("stopped")
	return nil
}
