package validate

import (
	"net"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookgate/hookgate/config"
)

// canary is a value that must never show up in any rendered environment:
// the tests put it where a careless template would copy it.
const canary = "hg-validate-canary-0d9e1f"

// fleet is what a rendering is expected to show.
type fleet struct {
	image    string
	replicas int32 // 0: autoscaled (no replicas, an HPA)
	watch    bool
	// secretFiles are the transform Secrets the values mount.
	secretFiles []string
	// want are objects the values ask for.
	wantMonitor, wantPDB, wantNetpol, wantSandboxNetpol bool
}

// checkFleet checks the invariants of a rendered chart.
func checkFleet(o *objects, f fleet) problems {
	var p problems
	if len(o.deployments) != 1 {
		p.add("want one Deployment, got %d", len(o.deployments))
		return p
	}
	d := o.deployments[0]
	spec := &d.Spec.Template.Spec
	podLabels := d.Spec.Template.Labels
	where := "Deployment " + d.Name
	if !selects(d.Spec.Selector, podLabels) {
		p.add("%s: its selector does not select its pods", where)
	}
	switch {
	case f.replicas == 0 && d.Spec.Replicas != nil:
		p.add("%s: autoscaled, but sets replicas", where)
	case f.replicas != 0 && (d.Spec.Replicas == nil || *d.Spec.Replicas != f.replicas):
		p.add("%s: replicas %v, want %d", where, d.Spec.Replicas, f.replicas)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("%s: mounts a service account token", where)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		p.add("%s: the pod may run as root", where)
	}
	if !antiAffine(spec, podLabels) {
		p.add("%s: no anti-affinity spreading the replicas over nodes", where)
	}
	p.capabilitiesOnly(where, spec, nil) // fleet mode: no capability at all
	p.noSecretInEnv(where, spec, []string{canary})
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 {
		p.add("%s: want the gateway container alone", where)
		return p
	}
	c := &spec.Containers[0]
	if c.Image != f.image {
		p.add("%s: image %q, want %q from values", where, c.Image, f.image)
	}
	if slices.Contains(c.Args, "--watch") != f.watch {
		p.add("%s: --watch in args is %v, want %v", where, !f.watch, f.watch)
	}
	if _, rolls := d.Spec.Template.Annotations["checksum/config"]; rolls == f.watch {
		p.add("%s: checksum/config annotation is %v with watch %v (a watching gateway reloads; one that does not must roll)", where, rolls, f.watch)
	}
	lc := p.loadGatewayConfig(where, spec, c, o.configMaps)
	if lc == nil {
		return p
	}
	p.probesOnHealthPaths(where, c, lc.cfg.AdminListen)
	for _, name := range f.secretFiles {
		if !slices.ContainsFunc(lc.secrets, func(s string) bool { return strings.Contains(s, "/"+name+"/") }) {
			p.add("%s: the config reads no file of the mounted Secret %s", where, name)
		}
	}
	proxyPort := portOf(lc.cfg.ProxyListen)
	p.checkService(o, podLabels, c, proxyPort)
	p.checkPDB(o, podLabels, f.wantPDB)
	p.checkHPA(o, d.Name, f.replicas == 0)
	p.checkMonitor(o, podLabels, f.wantMonitor)
	p.checkNetworkPolicies(o, podLabels, proxyPort, f)
	if want := "http://" + d.Name + "." + namespace + ".svc:" + proxyPort; !strings.Contains(o.notes, "HTTPS_PROXY, value: \""+want+"\"") {
		p.add("NOTES.txt does not tell sandboxes HTTPS_PROXY=%s:\n%s", want, o.notes)
	}
	return p
}

func portOf(listen string) string {
	_, port, _ := net.SplitHostPort(listen)
	return port
}

// antiAffine: the pods prefer or require nodes without another replica.
func antiAffine(spec *corev1.PodSpec, labels map[string]string) bool {
	a := spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if w.PodAffinityTerm.TopologyKey == "kubernetes.io/hostname" && selects(w.PodAffinityTerm.LabelSelector, labels) {
			return true
		}
	}
	for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == "kubernetes.io/hostname" && selects(t.LabelSelector, labels) {
			return true
		}
	}
	return false
}

func (p *problems) checkService(o *objects, podLabels map[string]string, c *corev1.Container, proxyPort string) {
	if len(o.services) != 1 {
		p.add("want one Service, got %d", len(o.services))
		return
	}
	s := o.services[0]
	if !selects(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, podLabels) {
		p.add("Service %s does not select the gateway pods", s.Name)
	}
	for _, sp := range s.Spec.Ports {
		if got := containerPort(c, sp.TargetPort); strings.HasPrefix(got, "(") {
			p.add("Service %s: port %s targets %s", s.Name, sp.Name, got)
		}
		if sp.Name == "proxy" && containerPort(c, sp.TargetPort) != proxyPort {
			p.add("Service %s: the proxy port does not lead to listen.proxy (%s)", s.Name, proxyPort)
		}
	}
}

func (p *problems) checkPDB(o *objects, podLabels map[string]string, want bool) {
	if len(o.pdbs) != boolCount(want) {
		p.add("want %d PodDisruptionBudget, got %d", boolCount(want), len(o.pdbs))
		return
	}
	for _, b := range o.pdbs {
		if !selects(b.Spec.Selector, podLabels) || b.Spec.MinAvailable == nil {
			p.add("PodDisruptionBudget %s does not keep gateway pods available", b.Name)
		}
	}
}

func (p *problems) checkHPA(o *objects, deployment string, want bool) {
	if len(o.hpas) != boolCount(want) {
		p.add("want %d HorizontalPodAutoscaler, got %d", boolCount(want), len(o.hpas))
		return
	}
	for _, h := range o.hpas {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != deployment {
			p.add("HorizontalPodAutoscaler %s scales %s %s", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
	}
}

func (p *problems) checkMonitor(o *objects, podLabels map[string]string, want bool) {
	if len(o.serviceMonitors) != boolCount(want) {
		p.add("want %d ServiceMonitor, got %d", boolCount(want), len(o.serviceMonitors))
		return
	}
	for _, m := range o.serviceMonitors {
		if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "admin" || m.Spec.Endpoints[0].Path != "/metrics" {
			p.add("ServiceMonitor %s does not scrape admin /metrics: %+v", m.Name, m.Spec.Endpoints)
		}
		if !selects(&m.Spec.Selector, o.services[0].Labels) {
			p.add("ServiceMonitor %s does not select the Service", m.Name)
		}
	}
}

// clusterRanges are ranges the gateway must not reach by default.
var clusterRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}

func (p *problems) checkNetworkPolicies(o *objects, podLabels map[string]string, proxyPort string, f fleet) {
	want := boolCount(f.wantNetpol) + boolCount(f.wantNetpol && f.wantSandboxNetpol)
	if len(o.networkPolicies) != want {
		p.add("want %d NetworkPolicies, got %d", want, len(o.networkPolicies))
		return
	}
	for _, np := range o.networkPolicies {
		switch {
		case selects(&np.Spec.PodSelector, podLabels):
			p.checkGatewayPolicy(np, proxyPort)
		case f.wantSandboxNetpol:
			p.checkSandboxPolicy(np, podLabels, proxyPort)
		default:
			p.add("NetworkPolicy %s selects neither the gateway nor the sandboxes", np.Name)
		}
	}
}

// checkGatewayPolicy: ingress to the proxy port from sandbox pods only;
// egress to the world minus the cluster's ranges, plus DNS.
func (p *problems) checkGatewayPolicy(np *networkingv1.NetworkPolicy, proxyPort string) {
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		p.add("NetworkPolicy %s: want Ingress and Egress policy types", np.Name)
	}
	proxyRule := false
	for _, r := range np.Spec.Ingress {
		for _, port := range r.Ports {
			if port.Port != nil && port.Port.String() == proxyPort {
				proxyRule = true
				if len(r.From) == 0 {
					p.add("NetworkPolicy %s: anyone may reach the proxy port", np.Name)
				}
				for _, peer := range r.From {
					if peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0 {
						p.add("NetworkPolicy %s: the proxy port is open to more than sandbox pods", np.Name)
					}
				}
			}
		}
	}
	if !proxyRule {
		p.add("NetworkPolicy %s: no ingress rule for the proxy port", np.Name)
	}
	world := false
	for _, r := range np.Spec.Egress {
		for _, peer := range r.To {
			if peer.IPBlock == nil {
				continue
			}
			if peer.IPBlock.CIDR == "0.0.0.0/0" {
				world = true
				for _, want := range clusterRanges {
					if !slices.Contains(peer.IPBlock.Except, want) {
						p.add("NetworkPolicy %s: egress to 0.0.0.0/0 does not except %s", np.Name, want)
					}
				}
			}
		}
	}
	if !world {
		p.add("NetworkPolicy %s: no egress to the internet", np.Name)
	}
}

// checkSandboxPolicy: sandbox pods may only reach the gateway's proxy port.
func (p *problems) checkSandboxPolicy(np *networkingv1.NetworkPolicy, gatewayLabels map[string]string, proxyPort string) {
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		p.add("NetworkPolicy %s: want policy type Egress", np.Name)
	}
	if len(np.Spec.Egress) == 0 {
		p.add("NetworkPolicy %s: sandboxes can reach nothing, not even the gateway", np.Name)
	}
	for _, r := range np.Spec.Egress {
		dns := len(r.Ports) > 0 && r.Ports[0].Port != nil && r.Ports[0].Port.String() == "53"
		for _, peer := range r.To {
			if !dns && (peer.IPBlock != nil || peer.PodSelector == nil || !selects(peer.PodSelector, gatewayLabels)) {
				p.add("NetworkPolicy %s: sandboxes may reach more than the gateway", np.Name)
			}
		}
		if !dns && (len(r.Ports) != 1 || r.Ports[0].Port.String() != proxyPort) {
			p.add("NetworkPolicy %s: sandboxes may reach the gateway on more than its proxy port", np.Name)
		}
	}
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// variations are the values the chart is rendered with, and what each
// rendering must show.
var variations = []struct {
	name   string
	values map[string]any
	want   fleet
}{
	{
		name:   "defaults",
		values: nil,
		want:   fleet{image: "hookgate/gateway:0.1.0", replicas: 2, watch: true, wantPDB: true, wantNetpol: true, wantSandboxNetpol: true},
	},
	{
		name: "everything",
		values: map[string]any{
			"image":          map[string]any{"repository": "registry.example.com/sec/hookgate", "tag": "v9.8.7"},
			"watch":          false,
			"ca":             map[string]any{"secretName": "hookgate-ca"},
			"adminToken":     map[string]any{"secretName": "hookgate-admin"},
			"secretFiles":    []any{map[string]any{"name": "telemetry", "secretName": "telemetry-token"}},
			"caBundle":       map[string]any{"certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
			"autoscaling":    map[string]any{"enabled": true},
			"podLabels":      map[string]any{"team": "agents"},
			"podAnnotations": map[string]any{"note": canary},
			"serviceMonitor": map[string]any{"enabled": true},
			"networkPolicy": map[string]any{
				"sandboxNamespaceSelector": map[string]any{"matchLabels": map[string]any{"hookgate.io/sandboxes": "true"}},
				"allowedInternalCIDRs":     []any{"10.20.0.0/16"},
				"sandboxDNS":               true,
				"adminFrom":                []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}},
			},
			"config": map[string]any{
				"listen": map[string]any{"proxy": "0.0.0.0:8080", "admin": "0.0.0.0:9901"},
				"network": map[string]any{
					"mode": "report",
					"allowlist": []any{
						map[string]any{"domain": "telemetry.example.com", "transform": map[string]any{"Authorization": "Bearer ${file:/etc/hookgate/secrets/telemetry/token}"}},
						map[string]any{"domain": "*.github.com"},
					},
					"allow_cidrs": []any{"10.20.0.0/16"},
				},
				"limits": map[string]any{"max_connections": 8192, "shutdown_grace": "20s"},
			},
		},
		want: fleet{image: "registry.example.com/sec/hookgate:v9.8.7", replicas: 0, watch: false, secretFiles: []string{"telemetry"},
			wantMonitor: true, wantPDB: true, wantNetpol: true, wantSandboxNetpol: true},
	},
	{
		name: "bare",
		values: map[string]any{
			"replicaCount":        3,
			"podDisruptionBudget": map[string]any{"enabled": false},
			"networkPolicy":       map[string]any{"enabled": false},
		},
		want: fleet{image: "hookgate/gateway:0.1.0", replicas: 3, watch: true},
	},
	{
		name: "own sandbox egress policy",
		values: map[string]any{
			"networkPolicy": map[string]any{"restrictSandboxEgress": false},
		},
		want: fleet{image: "hookgate/gateway:0.1.0", replicas: 2, watch: true, wantPDB: true, wantNetpol: true},
	},
}

// TestChartRenders renders the chart for each variation and checks every
// invariant.
func TestChartRenders(t *testing.T) {
	for _, v := range variations {
		t.Run(v.name, func(t *testing.T) {
			o, err := renderChart(v.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			for _, problem := range checkFleet(o, v.want) {
				t.Error(problem)
			}
		})
	}
}

// TestChartReportModeNotes: in report mode the notes say so and how to
// build the allowlist from the log.
func TestChartReportModeNotes(t *testing.T) {
	o, err := renderChart(map[string]any{"config": map[string]any{"network": map[string]any{"mode": "report"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(o.notes, "REPORT MODE") || !strings.Contains(o.notes, "gateway allowlist suggest --from -") {
		t.Fatalf("notes:\n%s", o.notes)
	}
	cfg := renderedConfig(t, o)
	if !cfg.Reporting() {
		t.Fatal("the rendered config is not in report mode")
	}
}

// renderedConfig loads the rendered gateway config.
func renderedConfig(t *testing.T, o *objects) *config.Config {
	t.Helper()
	var p problems
	spec := &o.deployments[0].Spec.Template.Spec
	lc := p.loadGatewayConfig("test", spec, &spec.Containers[0], o.configMaps)
	if lc == nil {
		t.Fatalf("config: %v", p)
	}
	return lc.cfg
}

// TestChecksCatchMistakes: the checks above do find what they look for
// (a check that finds nothing proves nothing).
func TestChecksCatchMistakes(t *testing.T) {
	base := variations[0].want
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"secret file not mounted", map[string]any{"config": map[string]any{"network": map[string]any{"allowlist": []any{
			map[string]any{"domain": "a.example.com", "transform": map[string]any{"X-Key": "${file:/etc/hookgate/secrets/nowhere/key}"}},
		}}}, "ca": map[string]any{"secretName": "ca"}}, "is not under a mounted Secret"},
		{"bad gateway config", map[string]any{"config": map[string]any{"network": map[string]any{"allowlist": []any{
			map[string]any{"domain": "https://a.example.com"},
		}}}}, "the gateway config does not load"},
		{"image not from values", map[string]any{"image": map[string]any{"tag": "other"}}, `image "hookgate/gateway:other", want`},
		{"sandboxes from anywhere", map[string]any{"networkPolicy": map[string]any{"sandboxPodSelector": map[string]any{"matchLabels": map[string]any{"hookgate.io/sandbox": nil}}}}, "the proxy port is open to more than sandbox pods"},
		{"no cluster ranges excepted", map[string]any{"networkPolicy": map[string]any{"clusterCIDRs": []any{"10.0.0.0/8"}}}, "does not except 172.16.0.0/12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := renderChart(tc.values)
			if err != nil {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
				t.Fatalf("render: %v", err)
			}
			got := checkFleet(o, base)
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("the checks did not report %q; they reported %v", tc.want, got)
			}
		})
	}
}
