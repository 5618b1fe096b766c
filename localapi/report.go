package localapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ReadReport reads the last reclaim's report from a data dir.
func ReadReport(dir string) (*ReclaimReport, error) {
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read reclaim report: %w", err)
	}
	var rep ReclaimReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("reclaim report %s: %w", filepath.Join(dir, ReportFile), err)
	}
	return &rep, nil
}

// WriteReport replaces the report file in a data dir atomically.
func WriteReport(dir string, rep *ReclaimReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, ReportFile)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
