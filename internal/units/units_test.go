package units

import (
	"encoding/json"
	"os"
	"testing"
)

// sizeCases is testdata/sizes.json: the sizes every client that reads a size string
// must accept, with their bytes, and the ones it must refuse. The Python SDK's tests
// read the same file.
type sizeCases struct {
	Accepted map[string]int64 `json:"accepted"`
	Refused  []string         `json:"refused"`
}

func TestParseSizeFollowsDocker(t *testing.T) {
	b, err := os.ReadFile("testdata/sizes.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases sizeCases
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatalf("testdata/sizes.json: %v", err)
	}
	if len(cases.Accepted) == 0 || len(cases.Refused) == 0 {
		t.Fatalf("testdata/sizes.json has no cases: %+v", cases)
	}
	for in, want := range cases.Accepted {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range cases.Refused {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d; want an error", in, got)
		}
	}
}
