package browsertest

import "testing"

const dom = `<html><body data-polls="7"><table>
<tr id="member-n1"><td>n1</td><td>alive</td></tr>
<tr id="member-n10"><td>n10</td><td>left</td></tr>
<tr id="job-a"><td>running</td>`

func TestPolls(t *testing.T) {
	if got := Polls(dom); got != 7 {
		t.Errorf("Polls: got %d, want 7", got)
	}
	if got := Polls(`<body class="x">`); got != -1 {
		t.Errorf("Polls without the attribute: got %d, want -1", got)
	}
}

func TestRow(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"member-n1", `id="member-n1"><td>n1</td><td>alive</td>`},
		{"member-n10", `id="member-n10"><td>n10</td><td>left</td>`},
		{"job-a", `id="job-a"><td>running</td>`}, // unterminated: to the end
		{"member-n2", ""},
	} {
		if got := Row(dom, c.id); got != c.want {
			t.Errorf("Row(%q): got %q, want %q", c.id, got, c.want)
		}
	}
}
