// Package testsupport is the plumbing the project's tests share for running
// against real components: it decides whether a test can run on this machine
// (skip locally, fail under CI=true), runs the test binary again as a child
// process (a helper role, a background daemon, or the same test in a fresh
// network namespace), waits for a condition, and collects output written
// concurrently. It is imported only by tests.
//
// A package whose tests start children lists them in its TestMain:
//
//	const holdChild = "hold-database"
//
//	func TestMain(m *testing.M) {
//		testsupport.Main(m, testsupport.Children{holdChild: holdDatabase})
//	}
//
// and a test starts one with testsupport.Command(t, holdChild, path).
package testsupport
