package web

import (
	"math"
	"reflect"
)

// clampNonFinite replaces the float values JSON cannot carry, in place:
// +Inf and −Inf become the largest finite value of the field's type (±math.MaxFloat64) and NaN becomes 0. Policy values
// may hold infinities (an unbounded score, a zero-bandwidth transfer time)
// and one of them must not make the whole /v1/status fail. v must be a
// pointer.
func clampNonFinite(v any) {
	clampValue(reflect.ValueOf(v))
}

func clampValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			clampValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				clampValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			clampValue(v.Index(i))
		}
	case reflect.Float32, reflect.Float64:
		if !v.CanSet() {
			return
		}
		limit := math.MaxFloat64
		if v.Kind() == reflect.Float32 {
			limit = math.MaxFloat32
		}
		f := v.Float()
		switch {
		case math.IsNaN(f):
			v.SetFloat(0)
		case math.IsInf(f, 1):
			v.SetFloat(limit)
		case math.IsInf(f, -1):
			v.SetFloat(-limit)
		}
	}
}
