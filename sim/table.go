package sim

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// The report's tables are written in Markdown (WriteTable, WriteSweep,
// WriteFrontier), for files and documents; TextTables lays the same
// tables out for a terminal.

var (
	// A separator row's cell: ---, :--, --: or :-:.
	separatorCell = regexp.MustCompile(`^:?-+:?$`)
	// A number as the tables print them (a sign, digits, a decimal point,
	// a unit suffix such as %, or a dash for "none"), right-aligned.
	numericCell = regexp.MustCompile(`^([−+-]?[0-9][0-9.,]*( ?%| s)?|—|-)$`)
)

// TextTables rewrites every Markdown table in s (a run of lines that
// start and end with '|') as columns padded to a common width, numbers
// right-aligned, with a rule under the header; other lines are kept.
func TextTables(s string) string {
	lines := strings.SplitAfter(s, "\n")
	var out strings.Builder
	for i := 0; i < len(lines); {
		if !isTableLine(lines[i]) {
			out.WriteString(lines[i])
			i++
			continue
		}
		j := i
		for j < len(lines) && isTableLine(lines[j]) {
			j++
		}
		out.WriteString(alignTable(lines[i:j]))
		i = j
	}
	return out.String()
}

func isTableLine(l string) bool {
	l = strings.TrimRight(l, "\n")
	return len(l) >= 2 && strings.HasPrefix(l, "|") && strings.HasSuffix(l, "|")
}

// alignTable lays out one table's lines.
func alignTable(lines []string) string {
	var rows [][]string
	separator := -1
	for _, l := range lines {
		l = strings.TrimRight(l, "\n")
		cells := strings.Split(l[1:len(l)-1], "|")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		isSep := true
		for _, c := range cells {
			isSep = isSep && separatorCell.MatchString(c)
		}
		if isSep && separator < 0 {
			separator = len(rows)
		}
		rows = append(rows, cells)
	}
	var width []int
	numeric := map[int]bool{}
	for r, cells := range rows {
		for k, c := range cells {
			if k == len(width) {
				width = append(width, 0)
				numeric[k] = true
			}
			if r == separator {
				continue
			}
			width[k] = max(width[k], utf8.RuneCountInString(c))
			if r > separator && separator >= 0 && c != "" && !numericCell.MatchString(c) {
				numeric[k] = false
			}
		}
	}
	var b strings.Builder
	for r, cells := range rows {
		var parts []string
		for k := range width {
			c := ""
			if k < len(cells) {
				c = cells[k]
			}
			pad := strings.Repeat(" ", max(width[k]-utf8.RuneCountInString(c), 0))
			switch {
			case r == separator:
				parts = append(parts, strings.Repeat("─", width[k]))
			case numeric[k] && separator >= 0:
				parts = append(parts, pad+c)
			default:
				parts = append(parts, c+pad)
			}
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " "))
		b.WriteString("\n")
	}
	return b.String()
}
