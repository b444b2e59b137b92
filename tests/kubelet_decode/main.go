// Decodes a /stats/summary body from stdin into the kubelet's Summary API types (types.go,
// vendored from k8s.io/kubelet/pkg/apis/stats/v1alpha1) the way a Go client does, and prints
// what the client holds. With -strict the decoder rejects unknown fields
// (json.Decoder.DisallowUnknownFields), as strict clients do. A body the types cannot hold (an
// unknown field under -strict, a float where a uint64 goes, a time that is not RFC 3339, a
// string where a number goes) exits 1 with the decoder's error. Standard library only.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	strict := flag.Bool("strict", false, "reject fields the kubelet's types do not declare")
	flag.Parse()
	decoder := json.NewDecoder(os.Stdin)
	if *strict {
		decoder.DisallowUnknownFields()
	}
	var summary Summary
	if err := decoder.Decode(&summary); err != nil {
		fmt.Fprintln(os.Stderr, "decode:", err)
		os.Exit(1)
	}
	// Re-encode what the client holds: the kubelet's field names, zero values filled in.
	out, err := json.Marshal(summary)
	if err != nil {
		fmt.Fprintln(os.Stderr, "encode:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}
