// Package check tests the shipped deployment files of deploy/ without a
// Docker engine or a Kubernetes cluster: docker-compose.yml loaded and
// validated by the compose-spec loader (what `docker compose config`
// runs), every manifest of k8s/ decoded strictly into the Kubernetes API
// types, and the safe defaults of deploy/README.md checked on what they
// load into ("What the shipped deployment enforces"). Each check has a
// test that breaks the file on purpose and watches it fail.
//
// It is a module of its own (the compose loader and the Kubernetes API
// types are large, and the product needs neither); `make test` runs it.
package check
