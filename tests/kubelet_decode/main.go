// Decodes a /stats/summary body from stdin into the kubelet's Summary API types
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1, the fields gpustats emits, with the kubelet's JSON
// tags and Go types) the way a Go client does, and prints what the client sees. A body the
// types cannot hold (a float where a uint64 goes, a time that is not RFC 3339, a string where
// a number goes) exits 1 with the decoder's error. Standard library only.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Time mirrors metav1.Time: RFC 3339 text, or null for the zero time.
type Time struct{ time.Time }

func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = parsed
	return nil
}

type Summary struct {
	Node NodeStats  `json:"node"`
	Pods []PodStats `json:"pods"`
}

type NodeStats struct {
	NodeName         string           `json:"nodeName"`
	SystemContainers []ContainerStats `json:"systemContainers,omitempty"`
	StartTime        Time             `json:"startTime"`
	CPU              *CPUStats        `json:"cpu,omitempty"`
	Memory           *MemoryStats     `json:"memory,omitempty"`
}

type PodReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

type PodStats struct {
	PodRef     PodReference     `json:"podRef"`
	StartTime  Time             `json:"startTime"`
	Containers []ContainerStats `json:"containers"`
	CPU        *CPUStats        `json:"cpu,omitempty"`
	Memory     *MemoryStats     `json:"memory,omitempty"`
}

type ContainerStats struct {
	Name         string             `json:"name"`
	StartTime    Time               `json:"startTime"`
	CPU          *CPUStats          `json:"cpu,omitempty"`
	Memory       *MemoryStats       `json:"memory,omitempty"`
	Accelerators []AcceleratorStats `json:"accelerators,omitempty"`
}

type CPUStats struct {
	Time                 Time    `json:"time"`
	UsageNanoCores       *uint64 `json:"usageNanoCores,omitempty"`
	UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds,omitempty"`
}

type MemoryStats struct {
	Time            Time    `json:"time"`
	AvailableBytes  *uint64 `json:"availableBytes,omitempty"`
	UsageBytes      *uint64 `json:"usageBytes,omitempty"`
	WorkingSetBytes *uint64 `json:"workingSetBytes,omitempty"`
	RSSBytes        *uint64 `json:"rssBytes,omitempty"`
	PageFaults      *uint64 `json:"pageFaults,omitempty"`
	MajorPageFaults *uint64 `json:"majorPageFaults,omitempty"`
}

type AcceleratorStats struct {
	Make        string `json:"make"`
	Model       string `json:"model"`
	ID          string `json:"id"`
	MemoryTotal uint64 `json:"memoryTotal"`
	MemoryUsed  uint64 `json:"memoryUsed"`
	DutyCycle   uint64 `json:"dutyCycle"`
}

func main() {
	var summary Summary
	if err := json.NewDecoder(os.Stdin).Decode(&summary); err != nil {
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
