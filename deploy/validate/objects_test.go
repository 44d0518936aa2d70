package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir   = "../helm/hookgate"
	sidecarDir = "../kubernetes/sidecar"
	release    = "hg"
	namespace  = "agents"
)

// serviceMonitor is the Prometheus Operator's ServiceMonitor, as far as
// the chart writes it; decoded strictly like the rest.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port              string                    `json:"port"`
			Path              string                    `json:"path"`
			Interval          string                    `json:"interval"`
			BearerTokenSecret *corev1.SecretKeySelector `json:"bearerTokenSecret,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kustomization is kustomize's file, as far as the sidecar writes it.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Resources       []string `json:"resources"`
}

// objects are the decoded objects of one rendering, by kind.
type objects struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	pods            []*corev1.Pod
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	networkPolicies []*networkingv1.NetworkPolicy
	serviceMonitors []*serviceMonitor
	kustomizations  []*kustomization
	notes           string
}

// decode adds one YAML document: its kind picks the API type, and
// UnmarshalStrict refuses unknown and duplicate fields.
func (o *objects) decode(source string, doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("%s: %v", source, err)
	}
	strict := func(into any) error {
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return fmt.Errorf("%s: %s %s: %v", source, tm.APIVersion, tm.Kind, err)
		}
		return nil
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		v := &appsv1.Deployment{}
		o.deployments = append(o.deployments, v)
		return strict(v)
	case "v1 Service":
		v := &corev1.Service{}
		o.services = append(o.services, v)
		return strict(v)
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		o.configMaps = append(o.configMaps, v)
		return strict(v)
	case "v1 Pod":
		v := &corev1.Pod{}
		o.pods = append(o.pods, v)
		return strict(v)
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		o.pdbs = append(o.pdbs, v)
		return strict(v)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		v := &autoscalingv2.HorizontalPodAutoscaler{}
		o.hpas = append(o.hpas, v)
		return strict(v)
	case "networking.k8s.io/v1 NetworkPolicy":
		v := &networkingv1.NetworkPolicy{}
		o.networkPolicies = append(o.networkPolicies, v)
		return strict(v)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v := &serviceMonitor{}
		o.serviceMonitors = append(o.serviceMonitors, v)
		return strict(v)
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		v := &kustomization{}
		o.kustomizations = append(o.kustomizations, v)
		return strict(v)
	}
	return fmt.Errorf("%s: unexpected object %s %s", source, tm.APIVersion, tm.Kind)
}

// decodeStream adds every document of a multi-document YAML stream.
func (o *objects) decodeStream(source string, r io.Reader) error {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %v", source, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		if err := o.decode(source, doc); err != nil {
			return err
		}
	}
}

// stripComments drops comment lines, to tell an empty document from one.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out.WriteString(line + "\n")
		}
	}
	return out.Bytes()
}

// renderChart renders the chart for a release with values on top of
// values.yaml, as `helm template` would, and decodes what it renders.
func renderChart(values map[string]any) (*objects, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(chrt, values, opts, chartutil.DefaultCapabilities.Copy())
	if err != nil {
		return nil, err
	}
	out, err := engine.Engine{Strict: true}.Render(chrt, vals)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	o := &objects{}
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			o.notes = out[name]
		case strings.HasSuffix(name, ".yaml"):
			if err := o.decodeStream(name, strings.NewReader(out[name])); err != nil {
				return nil, err
			}
		}
	}
	return o, nil
}

// readSidecar decodes every manifest of the sidecar directory.
func readSidecar(t *testing.T) *objects {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(sidecarDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", sidecarDir, err)
	}
	o := &objects{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.decodeStream(f, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// TestStrictDecodingRefusesUnknownFields: the decoding this package
// relies on does refuse a misspelt field.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	o := &objects{}
	doc := "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selectr: {a: b}\n"
	if err := o.decode("test", []byte(doc)); err == nil || !strings.Contains(err.Error(), "selectr") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}
