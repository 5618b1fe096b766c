package cli

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError turns pflag's parse errors into usage errors that name the
// flag and say what a valid value looks like.
func flagError(cmd *cobra.Command, err error) error {
	var (
		invalid  *pflag.InvalidValueError
		missing  *pflag.ValueRequiredError
		notExist *pflag.NotExistError
		syntax   *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return usagef("invalid value %q for --%s: %s", invalid.GetValue(), f.Name, valueHint(f, invalid.GetValue(), invalid.Unwrap()))
	case errors.As(err, &missing):
		return usagef("--%s needs a value", missing.GetFlag().Name)
	case errors.As(err, &notExist):
		name := notExist.GetSpecifiedName()
		if group := notExist.GetSpecifiedShortnames(); group != "" {
			// "-days": a long flag given with one dash.
			if cmd.Flags().Lookup(group) != nil {
				return usagef("unknown flag -%s (long flags take two dashes: --%s)", group, group)
			}
			return usagef("unknown flag -%s in -%s", name[:1], group)
		}
		return usagef("unknown flag --%s", name)
	case errors.As(err, &syntax):
		return usagef("bad flag syntax %q", syntax.GetSpecifiedFlag())
	}
	return usagef("%v", err)
}

// valueHint explains a rejected flag value. Values of the common types
// get a plain-words hint instead of the parser's message.
func valueHint(f *pflag.Flag, value string, cause error) string {
	switch f.Value.Type() {
	case "duration":
		if _, err := time.ParseDuration(value); err != nil {
			return durationHint(value)
		}
	case "int", "int64", "uint", "uint64":
		if _, err := strconv.ParseInt(value, 10, 64); err != nil {
			return "want a whole number"
		}
	case "float64", "float32":
		if _, err := strconv.ParseFloat(value, 64); err != nil {
			return "want a number"
		}
	case "bool":
		return "want true or false"
	}
	if cause == nil {
		return "not valid"
	}
	return cause.Error()
}

// durationHint says what is wrong with a duration that does not parse.
func durationHint(value string) string {
	if _, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
		return "a duration needs a unit (ns, us, ms, s, m, h)"
	}
	return "want a duration such as 90s, 10m or 1h30m"
}

// typedValue gives a standard library flag.Value the Type pflag shows in
// the help ("--gpu spec").
type typedValue struct {
	flag.Value
	typ string
}

func (v typedValue) Type() string { return v.typ }

// typed wraps v for a pflag.FlagSet.
func typed(v flag.Value, typ string) pflag.Value { return typedValue{v, typ} }
