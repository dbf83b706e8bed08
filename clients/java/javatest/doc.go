// Package javatest holds the Go test that builds and tests the Java client
// in clients/java against a real `baton serve` and ZooKeeper: the Java unit
// tests, the integration scenarios (exclusion and fencing tokens between a
// Java and a Go holder, scenario 3, timeout → InstanceLockException, a lost
// lock told to the Java holder, background ops, release at process exit),
// and the check that code written against the original plugin's API
// compiles and runs with only its imports changed. It needs a JDK (javac);
// `make deps` installs one.
package javatest
