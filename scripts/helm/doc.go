// Package helm holds the test of floodgate's Helm chart (deploy/helm/floodgate),
// in a module of its own so that floodgate's go.mod does not require Helm or
// the Kubernetes API types: `make helm-check` renders the chart with Helm's
// Go packages for its default values and for each listener, decodes every
// object strictly into the Kubernetes API types, and checks the rendered
// floodgate.yaml with `floodgate validate`, its Secrets laid out where the
// Deployment mounts them.
package helm
