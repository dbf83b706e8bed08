// Package deploy holds Baton's deployment files, checked by this package's
// tests: kubernetes.yaml (decoded into the Kubernetes API types),
// baton.service (systemd-analyze verify), docker-compose.yml and its test
// override at the repository's top (the compose-spec loader), the
// Dockerfile, and the example baton.properties (Baton's own loader).
// `make deploy-test` (test/run.sh) runs the compose stack in a real Docker
// engine.
package deploy
