// Package validate checks the Kubernetes packaging without a cluster: it
// renders the Helm chart (deploy/helm/hookgate) with Helm's Go library for
// several sets of values, reads the sidecar manifests
// (deploy/kubernetes/sidecar), decodes every object strictly into the
// Kubernetes API types (an unknown field is an error), and checks the
// invariants the packaging promises: non-root and read-only gateways
// without capabilities in fleet mode, NET_ADMIN for the sidecar gateway
// alone, no secret in any environment, probes on the admin API's health
// paths, images from values, and a gateway config that loads.
//
// It is a module of its own so that Helm and the Kubernetes API types stay
// out of the gateway's dependencies; .ci/run runs its tests.
package validate
