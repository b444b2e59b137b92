package main

import (
	"encoding/json"
	"time"
)

// Time stands in for metav1.Time (k8s.io/apimachinery/pkg/apis/meta/v1/time.go): it decodes
// RFC 3339 text, or null as the zero time, and encodes as RFC 3339 in UTC, or null when zero.
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

func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}
