package sidecar

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/batonhq/baton/internal/tlsfiles"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

// zkTLS builds the ZooKeeper TLS configuration, or nil when TLS is off.
func zkTLS(cfg props.Config) (*tls.Config, error) {
	if cfg.ZKTLSEnabled != "true" {
		return nil, nil
	}
	c, err := tlsfiles.Files{
		CA: cfg.ZKTLSCAFile, Cert: cfg.ZKTLSCertFile, Key: cfg.ZKTLSKeyFile, ServerName: cfg.ZKTLSServerName,
		CAKey: "zookeeper.tls.ca.file", CertKey: "zookeeper.tls.cert.file", KeyKey: "zookeeper.tls.key.file",
		ServerNameKey: "zookeeper.tls.server.name",
	}.Config()
	if err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	return c, nil
}

// EngineOptions maps the configuration to the lock engine's options. It is
// the one place where properties become engine settings. The engine's
// ForegroundWait and BackgroundWait are fixed when it starts; the server
// passes the current type timeout with every acquire instead, so that a
// reload applies to later waits. Logger may be nil (discard).
func EngineOptions(cfg props.Config, logger *slog.Logger) (lock.Options, error) {
	var on lock.ObjectNode
	switch cfg.ObjectNode {
	case "", "container":
		on = lock.Container
	case "persistent":
		on = lock.Persistent
	default:
		return lock.Options{}, fmt.Errorf("sidecar: zookeeper.object.node: %q is not container or persistent", cfg.ObjectNode)
	}
	proto := lock.Plugin
	if cfg.LockProtocol != "" {
		p, err := lock.ParseProtocol(cfg.LockProtocol)
		if err != nil {
			return lock.Options{}, fmt.Errorf("sidecar: zookeeper.lock.protocol: %q is not plugin or native", cfg.LockProtocol)
		}
		proto = p
	}
	if len(cfg.ZKServers) == 0 {
		return lock.Options{}, fmt.Errorf("sidecar: zookeeper.servers: empty")
	}
	tlsCfg, err := zkTLS(cfg)
	if err != nil {
		return lock.Options{}, err
	}
	digest, err := cfg.ZKDigest()
	if err != nil {
		return lock.Options{}, fmt.Errorf("sidecar: %w", err)
	}
	return lock.Options{
		Servers:          append([]string(nil), cfg.ZKServers...),
		Chroot:           cfg.ZKChroot,
		Root:             cfg.LockRoot,
		ObjectNode:       on,
		Protocol:         proto,
		SessionTimeout:   cfg.ZKSessionTimeout,
		TickTime:         cfg.ZKTickTime,
		TLS:              tlsCfg,
		ForegroundPrefix: cfg.ForegroundPrefix,
		BackgroundPrefix: cfg.BackgroundPrefix,
		ForegroundWait:   cfg.ForegroundTimeout,
		BackgroundWait:   cfg.BackgroundTimeout,
		AuthDigest:       digest,
		NodeID:           cfg.NodeID,
		Logger:           logger,
		// delay.go: lock-delay (also passed per acquire) and aging
		LockDelay:         cfg.LockDelay,
		BackgroundMaxWait: cfg.BackgroundMaxWait,
	}, nil
}
