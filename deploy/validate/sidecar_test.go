package validate

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkSidecar checks the invariants of the sidecar manifests: the gateway
// is a native sidecar running serve --redirect, the only container with
// NET_ADMIN; the agent is unprivileged, has no secret mounted and none in
// its environment, and trusts the CA from a ConfigMap.
func checkSidecar(o *objects) problems {
	var p problems
	if len(o.pods) != 1 {
		p.add("want one Pod, got %d", len(o.pods))
		return p
	}
	pod := o.pods[0]
	spec := &pod.Spec
	where := "Pod " + pod.Name
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("%s: a service account token is mounted in every container", where)
	}
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		p.add("%s: want the gateway as the one init container and the agent as the one container", where)
		return p
	}
	gw, agent := &spec.InitContainers[0], &spec.Containers[0]
	if gw.RestartPolicy == nil || *gw.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		p.add("%s: the gateway is not a native sidecar (restartPolicy: Always)", where)
	}
	p.capabilitiesOnly(where, spec, map[string][]corev1.Capability{gw.Name: {"NET_ADMIN"}})
	p.noSecretInEnv(where, spec, nil)
	for _, flag := range []string{"serve", "--redirect", "--keep-rules", "--watch"} {
		if !slices.Contains(gw.Args, flag) {
			p.add("%s: the gateway's args lack %s", where, flag)
		}
	}
	if gw.StartupProbe == nil {
		p.add("%s: the gateway has no startup probe: the agent would start before the redirect rules exist", where)
	}
	lc := p.loadGatewayConfig(where, spec, gw, o.configMaps)
	if lc != nil {
		p.probesOnHealthPaths(where, gw, lc.cfg.AdminListen)
		if lc.cfg.TransparentListen == "" || lc.cfg.DNSListen == "" {
			p.add("%s: --redirect needs listen.transparent and listen.dns", where)
		}
		if lc.cfg.AdminTokenFile == "" {
			p.add("%s: the admin API listens on the pod's address without a token", where)
		}
	}

	sc := agent.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		p.add("%s: the agent may run as root", where)
	}
	secrets := secretVolumes(spec)
	for _, m := range agent.VolumeMounts {
		if secrets[m.Name] {
			p.add("%s: the agent mounts the secret volume %s", where, m.Name)
		}
	}
	for _, e := range agent.Env {
		if strings.HasSuffix(strings.ToLower(e.Name), "_proxy") {
			p.add("%s: the agent has the proxy variable %s (transparent mode needs none)", where, e.Name)
		}
	}
	p.agentTrustsCAFromConfigMap(where, spec, agent)
	if len(o.networkPolicies) != 1 || !selects(&o.networkPolicies[0].Spec.PodSelector, pod.Labels) || len(o.networkPolicies[0].Spec.Ingress) != 0 {
		p.add("want one NetworkPolicy refusing every connection to the agent pod")
	}
	return p
}

// agentTrustsCAFromConfigMap: SSL_CERT_FILE names a file of a ConfigMap
// mounted in the agent.
func (p *problems) agentTrustsCAFromConfigMap(where string, spec *corev1.PodSpec, agent *corev1.Container) {
	i := slices.IndexFunc(agent.Env, func(e corev1.EnvVar) bool { return e.Name == "SSL_CERT_FILE" })
	if i < 0 {
		p.add("%s: the agent has no SSL_CERT_FILE", where)
		return
	}
	m := mountFor(mountsOf(spec, agent), agent.Env[i].Value)
	if m == nil || m.volume.ConfigMap == nil {
		p.add("%s: the agent's SSL_CERT_FILE %s is not in a mounted ConfigMap", where, agent.Env[i].Value)
	}
}

// TestSidecarManifests decodes the sidecar manifests strictly and checks
// them; kustomization.yaml must list every other manifest.
func TestSidecarManifests(t *testing.T) {
	o := readSidecar(t)
	for _, problem := range checkSidecar(o) {
		t.Error(problem)
	}
	if len(o.kustomizations) != 1 {
		t.Fatalf("want one kustomization.yaml, got %d", len(o.kustomizations))
	}
	files, _ := filepath.Glob(filepath.Join(sidecarDir, "*.yaml"))
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(o.kustomizations[0].Resources, base) {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
}

// TestSidecarChecksCatchMistakes: the sidecar checks find a capability on
// the agent and a secret mounted in it.
func TestSidecarChecksCatchMistakes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.PodSpec)
		want   string
	}{
		{"agent with NET_ADMIN", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "container agent adds capabilities [NET_ADMIN]"},
		{"secret in the agent", func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "api-token", MountPath: "/run/token"})
		}, "the agent mounts the secret volume api-token"},
		{"secret in the environment", func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "api-token"}, Key: "token"}}})
		}, "env TOKEN comes from Secret api-token"},
		{"plain init container", func(s *corev1.PodSpec) { s.InitContainers[0].RestartPolicy = nil }, "not a native sidecar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := readSidecar(t)
			tc.mutate(&o.pods[0].Spec)
			got := checkSidecar(o)
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("the checks did not report %q; they reported %v", tc.want, got)
			}
		})
	}
}
