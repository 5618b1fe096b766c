// Package localapi is a node's local control API as its clients see it:
// the control socket and info file in the data dir, the request and
// response types with their operations and error kinds, the views the CLI
// prints (members, jobs, a reclaim's progress and the owner's report), the
// report file, and the client (Call, and Fetch for the fetch stream, whose
// frames carry a job's results for the CLI to write as its caller). The CLI, the campus tests and the
// demo talk to a running agent through it without linking the node: it
// depends on the standard library only.
package localapi
