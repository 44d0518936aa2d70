package validate

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// healthPaths are the admin API's health checks: what a probe may ask.
var healthPaths = map[string]string{"readiness": "/readyz", "startup": "/readyz", "liveness": "/healthz"}

// problems collects what a check finds.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// noSecretInEnv: no container takes an environment variable from a Secret,
// and no variable's value holds one of the canaries.
func (p *problems) noSecretInEnv(where string, spec *corev1.PodSpec, canaries []string) {
	for _, c := range allContainers(spec) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				p.add("%s: container %s: env %s comes from Secret %s", where, c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
			for _, s := range canaries {
				if strings.Contains(e.Value, s) {
					p.add("%s: container %s: env %s holds a secret value", where, c.Name, e.Name)
				}
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				p.add("%s: container %s: envFrom Secret %s", where, c.Name, ef.SecretRef.Name)
			}
		}
	}
}

func allContainers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// capabilitiesOnly: every container drops ALL, and adds exactly what
// allowed names for it (nothing for a container not in allowed).
func (p *problems) capabilitiesOnly(where string, spec *corev1.PodSpec, allowed map[string][]corev1.Capability) {
	for _, c := range allContainers(spec) {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			p.add("%s: container %s does not drop ALL capabilities", where, c.Name)
			continue
		}
		if !slices.Equal(sc.Capabilities.Add, allowed[c.Name]) {
			p.add("%s: container %s adds capabilities %v, want %v", where, c.Name, sc.Capabilities.Add, allowed[c.Name])
		}
		if sc.Privileged != nil && *sc.Privileged {
			p.add("%s: container %s is privileged", where, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			p.add("%s: container %s may escalate privileges", where, c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			p.add("%s: container %s has a writable root filesystem", where, c.Name)
		}
	}
}

// probesOnHealthPaths: the container's probes are HTTP GETs of the admin
// API's health paths, on the port the gateway config's listen.admin names.
func (p *problems) probesOnHealthPaths(where string, c *corev1.Container, adminListen string) {
	_, port, err := net.SplitHostPort(adminListen)
	if err != nil {
		p.add("%s: listen.admin %q is not host:port", where, adminListen)
		return
	}
	for kind, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if probe == nil {
			if kind != "startup" {
				p.add("%s: container %s has no %s probe", where, c.Name, kind)
			}
			continue
		}
		if probe.HTTPGet == nil {
			p.add("%s: %s probe is not an HTTP GET", where, kind)
			continue
		}
		if probe.HTTPGet.Path != healthPaths[kind] {
			p.add("%s: %s probe asks %s, want %s", where, kind, probe.HTTPGet.Path, healthPaths[kind])
		}
		if got := containerPort(c, probe.HTTPGet.Port); got != port {
			p.add("%s: %s probe hits port %s, but the gateway's admin API listens on %s", where, kind, got, port)
		}
	}
}

// containerPort resolves a probe's port (a number or a port name).
func containerPort(c *corev1.Container, port intstr.IntOrString) string {
	if port.Type == intstr.Int {
		return port.String()
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return fmt.Sprint(cp.ContainerPort)
		}
	}
	return "(no port named " + port.StrVal + ")"
}

// mount is where a volume of the pod is mounted in a container.
type mount struct {
	path   string
	volume *corev1.Volume
}

func mountsOf(spec *corev1.PodSpec, c *corev1.Container) []mount {
	var out []mount
	for _, m := range c.VolumeMounts {
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == m.Name {
				out = append(out, mount{path: m.MountPath, volume: &spec.Volumes[i]})
			}
		}
	}
	return out
}

// mountFor is the mount a file lives under, or nil.
func mountFor(mounts []mount, file string) *mount {
	for i, m := range mounts {
		if filepath.Dir(file) == filepath.Clean(m.path) {
			return &mounts[i]
		}
	}
	return nil
}

// loadedConfig is a gateway config as the pod would load it.
type loadedConfig struct {
	cfg     *config.Config
	secrets []string // the ${file:} files it reads
}

// loadGatewayConfig runs the gateway's own config loader (what `gateway
// check` runs first) on the config file the container's --config names,
// from the ConfigMap mounted there; the ${file:} files it reads must live
// in a Secret mounted in the container, and are given a stand-in value.
func (p *problems) loadGatewayConfig(where string, spec *corev1.PodSpec, c *corev1.Container, cms []*corev1.ConfigMap) *loadedConfig {
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		p.add("%s: container %s has no --config", where, c.Name)
		return nil
	}
	file := c.Args[i+1]
	mounts := mountsOf(spec, c)
	m := mountFor(mounts, file)
	if m == nil || m.volume.ConfigMap == nil {
		p.add("%s: --config %s is not in a mounted ConfigMap", where, file)
		return nil
	}
	var text string
	found := false
	for _, cm := range cms {
		if cm.Name == m.volume.ConfigMap.Name {
			text, found = cm.Data[filepath.Base(file)]
		}
	}
	if !found {
		p.add("%s: ConfigMap %s has no key %s", where, m.volume.ConfigMap.Name, filepath.Base(file))
		return nil
	}
	lc := &loadedConfig{}
	readFile := func(path string) ([]byte, error) {
		lc.secrets = append(lc.secrets, path)
		if sm := mountFor(mounts, path); sm == nil || sm.volume.Secret == nil {
			p.add("%s: ${file:%s} is not under a mounted Secret", where, path)
		}
		return []byte("stand-in-secret-value"), nil
	}
	cfg, err := config.Parse(file, []byte(text), config.Options{Transform: transform.Options{ReadFile: readFile, LookupEnv: func(string) (string, bool) { return "", false }}})
	if err != nil {
		p.add("%s: the gateway config does not load: %v", where, err)
		return nil
	}
	lc.cfg = cfg
	for field, f := range map[string]string{"ca.cert_file": cfg.CACertFile, "ca.key_file": cfg.CAKeyFile, "admin.token_file": cfg.AdminTokenFile} {
		if f == "" {
			continue
		}
		if sm := mountFor(mounts, f); sm == nil || sm.volume.Secret == nil {
			p.add("%s: %s %s is not under a mounted Secret", where, field, f)
		}
	}
	return lc
}

// selects reports whether a label selector selects labels.
func selects(sel *metav1.LabelSelector, labels map[string]string) bool {
	if sel == nil || len(sel.MatchLabels) == 0 {
		return false
	}
	for k, v := range sel.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// secretVolumes are the names of the volumes that carry a Secret or a
// service account token.
func secretVolumes(spec *corev1.PodSpec) map[string]bool {
	out := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			out[v.Name] = true
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil || s.ServiceAccountToken != nil {
					out[v.Name] = true
				}
			}
		}
	}
	return out
}
