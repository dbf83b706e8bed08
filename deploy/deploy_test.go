package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/batonhq/baton/props"
)

// envKeys returns the BATON_ variables Baton reads: one per property key.
func envKeys() map[string]string {
	out := map[string]string{}
	for _, k := range props.Keys() {
		out[k.Env] = k.Key
	}
	return out
}

// loadProps validates a properties text with Baton's own loader, as
// `baton serve --config` would, with env (NAME=value) on top.
func loadProps(t *testing.T, text string, env []string) *props.Loaded {
	t.Helper()
	f := filepath.Join(t.TempDir(), "baton.properties")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := props.Load(props.LoadOptions{File: f, Env: env})
	if err != nil {
		t.Fatalf("the properties do not load: %v", err)
	}
	for _, w := range l.Warnings {
		t.Errorf("properties warning: %s", w)
	}
	return l
}

// TestKubernetes decodes kubernetes.yaml strictly (unknown fields are
// errors) into the Kubernetes API types and checks what the sidecar
// needs: a native sidecar, the socket in a shared emptyDir, a shared
// process namespace (caller-exit release), probes and a drain over the
// socket, the properties from the ConfigMap, and only BATON_ variables
// that Baton reads.
func TestKubernetes(t *testing.T) {
	b, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	var sts *appsv1.StatefulSet
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("kubernetes.yaml: %v", err)
		}
		switch meta.Kind {
		case "ConfigMap":
			cm = new(corev1.ConfigMap)
			err = yaml.UnmarshalStrict(doc, cm)
		case "StatefulSet":
			sts = new(appsv1.StatefulSet)
			err = yaml.UnmarshalStrict(doc, sts)
		default:
			t.Fatalf("kubernetes.yaml: unexpected kind %q", meta.Kind)
		}
		if err != nil {
			t.Fatalf("kubernetes.yaml %s: %v", meta.Kind, err)
		}
	}
	if cm == nil || sts == nil {
		t.Fatal("kubernetes.yaml: want a ConfigMap and a StatefulSet")
	}
	pod := sts.Spec.Template.Spec
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		t.Error(`shareProcessNamespace is not true: "bind":"process" leases would not be released at the caller's exit`)
	}

	var baton *corev1.Container
	for i, c := range pod.InitContainers {
		if c.Name == "baton" {
			baton = &pod.InitContainers[i]
		}
	}
	if baton == nil {
		t.Fatal("no init container baton (a native sidecar)")
	}
	if baton.RestartPolicy == nil || *baton.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the baton init container has no restartPolicy: Always (not a native sidecar)")
	}
	for _, c := range pod.Containers {
		if c.Name == "baton" {
			t.Error("baton is also an ordinary container")
		}
	}

	// The properties: from the ConfigMap, through --config, valid for Baton.
	var cfgFile, cfgVolume string
	for i, a := range baton.Args {
		if a == "--config" && i+1 < len(baton.Args) {
			cfgFile = baton.Args[i+1]
		}
	}
	if len(baton.Args) == 0 || baton.Args[0] != "serve" || cfgFile == "" {
		t.Fatalf("baton args %q: want serve --config FILE", baton.Args)
	}
	for _, m := range baton.VolumeMounts {
		if strings.HasPrefix(cfgFile, m.MountPath+"/") {
			cfgVolume = m.Name
		}
	}
	var key string
	for _, v := range pod.Volumes {
		if v.Name == cfgVolume {
			if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
				t.Fatalf("%s is not mounted from ConfigMap %s", cfgFile, cm.Name)
			}
			key = filepath.Base(cfgFile)
		}
	}
	text, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no %q (the file --config reads)", cm.Name, key)
	}
	var env []string
	known := envKeys()
	for _, e := range baton.Env {
		if strings.HasPrefix(e.Name, props.EnvPrefix) {
			if _, ok := known[e.Name]; !ok {
				t.Errorf("baton's env %s is read by nothing (Baton reads BATON_ + a property key)", e.Name)
			}
			env = append(env, e.Name+"=test-value")
		}
	}
	l := loadProps(t, text, env)
	sock := l.Config.SocketPath

	// The socket: an emptyDir mounted in the sidecar and the app at its directory.
	mountOf := func(c corev1.Container) string {
		for _, m := range c.VolumeMounts {
			if m.MountPath == filepath.Dir(sock) {
				return m.Name
			}
		}
		return ""
	}
	sockVol := mountOf(*baton)
	if sockVol == "" {
		t.Fatalf("baton mounts nothing at %s (sidecar.socket.path %s)", filepath.Dir(sock), sock)
	}
	for _, v := range pod.Volumes {
		if v.Name == sockVol && v.EmptyDir == nil {
			t.Errorf("the socket volume %s is not an emptyDir", sockVol)
		}
	}
	if len(pod.Containers) == 0 {
		t.Fatal("no app container")
	}
	for _, c := range pod.Containers {
		if mountOf(c) != sockVol {
			t.Errorf("container %s does not mount %s at %s", c.Name, sockVol, filepath.Dir(sock))
		}
		for _, e := range c.Env {
			if !strings.HasPrefix(e.Name, props.EnvPrefix) {
				continue
			}
			if _, ok := known[e.Name]; !ok {
				t.Errorf("container %s: env %s is read by nothing", c.Name, e.Name)
			}
			if e.Name == "BATON_SIDECAR_SOCKET_PATH" && e.Value != sock {
				t.Errorf("container %s: BATON_SIDECAR_SOCKET_PATH=%s, the sidecar listens on %s", c.Name, e.Value, sock)
			}
		}
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
		t.Error("no pod fsGroup: the app may not reach the 0660 socket")
	}

	// Probes and preStop: the baton CLI over the socket, with the same config.
	exe := func(what string, h *corev1.ExecAction, want string) {
		if h == nil {
			t.Errorf("%s: no exec action", what)
			return
		}
		if len(h.Command) < 2 || !strings.HasSuffix(h.Command[0], "/baton") || h.Command[1] != want ||
			!slices.Contains(h.Command, cfgFile) {
			t.Errorf("%s runs %q, want baton %s --config %s", what, h.Command, want, cfgFile)
		}
	}
	if baton.StartupProbe == nil || baton.ReadinessProbe == nil {
		t.Fatal("baton has no startupProbe or readinessProbe")
	}
	exe("startupProbe", baton.StartupProbe.Exec, "status")
	exe("readinessProbe", baton.ReadinessProbe.Exec, "status")
	if baton.Lifecycle == nil || baton.Lifecycle.PreStop == nil {
		t.Fatal("baton has no preStop hook")
	}
	exe("preStop", baton.Lifecycle.PreStop.Exec, "drain")
	if baton.LivenessProbe != nil {
		t.Error("a livenessProbe restarts the sidecar (dropping every lease) during a ZooKeeper outage; see the comment in kubernetes.yaml")
	}
	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= l.Config.ShutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v is not above sidecar.shutdown.grace %v", grace, l.Config.ShutdownGrace)
	}
	var queue bool
	for _, m := range baton.VolumeMounts {
		if m.MountPath == l.Config.QueueDir {
			queue = slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name })
		}
	}
	if !queue {
		t.Errorf("queue.dir %s is not on a volume claim: accepted ops would not survive the pod", l.Config.QueueDir)
	}
}

// TestExampleProperties: deploy/baton.properties loads without error or warning.
func TestExampleProperties(t *testing.T) {
	b, err := os.ReadFile("baton.properties")
	if err != nil {
		t.Fatal(err)
	}
	loadProps(t, string(b), nil)
}

// TestCompose loads docker-compose.yml, alone and with the test override,
// with the compose-spec loader (as `docker compose` does) and checks the
// socket volume, the variables and the images.
func TestCompose(t *testing.T) {
	known := envKeys()
	env := []string{"ZK_PORT=2181", "KAFKA_PORT=9092", "APP_PORT=8080"}
	for _, files := range [][]string{{"docker-compose.yml"}, {"docker-compose.yml", "docker-compose.test.yml"}} {
		t.Run(strings.Join(files, "+"), func(t *testing.T) {
			var paths []string
			for _, f := range files {
				paths = append(paths, filepath.Join("..", f))
			}
			opts, err := cli.NewProjectOptions(paths, cli.WithWorkingDirectory(".."), cli.WithEnv(env), cli.WithName("baton"))
			if err != nil {
				t.Fatal(err)
			}
			p, err := opts.LoadProject(context.Background())
			if err != nil {
				t.Fatalf("compose-go: %v", err)
			}
			for _, name := range []string{"zookeeper", "kafka", "baton", "app"} {
				if _, ok := p.Services[name]; !ok {
					t.Fatalf("no service %s", name)
				}
			}
			baton, app := p.Services["baton"], p.Services["app"]
			if baton.Build == nil || baton.Build.Dockerfile != "deploy/Dockerfile" {
				t.Errorf("baton is not built from deploy/Dockerfile: %+v", baton.Build)
			}
			var bEnv []string
			for _, s := range []types.ServiceConfig{baton, app} {
				for k, v := range s.Environment {
					if _, ok := known[k]; strings.HasPrefix(k, props.EnvPrefix) && !ok {
						t.Errorf("service %s: %s is read by nothing", s.Name, k)
					}
					if s.Name == "baton" && v != nil {
						bEnv = append(bEnv, k+"="+*v)
					}
				}
			}
			l, err := props.Load(props.LoadOptions{NoFile: true, Env: bEnv})
			if err != nil {
				t.Fatalf("baton's environment: %v", err)
			}
			sockDir := filepath.Dir(l.Config.SocketPath)
			vol := func(s types.ServiceConfig) string {
				for _, v := range s.Volumes {
					if v.Target == sockDir {
						return v.Source
					}
				}
				return ""
			}
			if vol(baton) == "" || vol(baton) != vol(app) {
				t.Errorf("baton and app do not share a volume at %s: %q, %q", sockDir, vol(baton), vol(app))
			}
			if !slices.Contains(app.GroupAdd, "65532") {
				t.Errorf("app is not in group 65532, the socket's (mode 0660)")
			}
			if baton.HealthCheck == nil || !slices.Contains(baton.HealthCheck.Test, "status") {
				t.Errorf("baton's healthcheck is not `baton status`: %+v", baton.HealthCheck)
			}
			if len(files) == 2 {
				for name, s := range p.Services {
					if s.NetworkMode != "host" {
						t.Errorf("test override: service %s is not on the host network", name)
					}
				}
				if !strings.HasPrefix(l.Config.AppURL, "http://127.0.0.1:8080/") {
					t.Errorf("test override: sidecar.app.url %q is not the stand-in app", l.Config.AppURL)
				}
			}
		})
	}
}

// TestSystemdUnit runs `systemd-analyze verify` on baton.service, with
// ExecStart pointing at an existing executable (this test's binary)
// instead of /usr/local/bin/baton.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile("baton.service")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("ExecStart=/usr/local/bin/baton serve")) {
		t.Fatalf("baton.service does not run /usr/local/bin/baton serve")
	}
	unit := filepath.Join(t.TempDir(), "baton.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/baton"), []byte(exe)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
