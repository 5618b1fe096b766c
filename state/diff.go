package state

import (
	"math"
	"reflect"
	"time"
)

// Tolerances under which two decision sets count as the same: the hazard
// bound and bandwidth estimates drift a little every period (exposure
// grows), and committing every drift would put a log entry in every
// period for nothing. A drift is still committed once the last commit is
// older than the refresh period (the leader loop in package raft).
const (
	relTolerance = 0.01 // floats and durations: 1 %
)

// MateriallyEqual reports whether a and b are equal up to relTolerance on
// floats and durations and timeTol on times.
func MateriallyEqual(a, b any, timeTol time.Duration) bool {
	return approxEqual(reflect.ValueOf(a), reflect.ValueOf(b), timeTol)
}

var durationType = reflect.TypeFor[time.Duration]()

func approxEqual(a, b reflect.Value, timeTol time.Duration) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		return closeEnough(a.Float(), b.Float())
	case reflect.Int64:
		if a.Type() == durationType {
			return closeEnough(float64(a.Int()), float64(b.Int()))
		}
		return a.Int() == b.Int()
	case reflect.Struct:
		if a.Type() == timeType {
			d := a.Interface().(time.Time).Sub(b.Interface().(time.Time))
			return d.Abs() <= timeTol
		}
		for i := range a.NumField() {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if !approxEqual(a.Field(i), b.Field(i), timeTol) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !approxEqual(a.Index(i), b.Index(i), timeTol) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		iter := a.MapRange()
		for iter.Next() {
			bv := b.MapIndex(iter.Key())
			if !bv.IsValid() || !approxEqual(iter.Value(), bv, timeTol) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return approxEqual(a.Elem(), b.Elem(), timeTol)
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func closeEnough(x, y float64) bool {
	if x == y {
		return true
	}
	scale := math.Max(math.Abs(x), math.Abs(y))
	return math.Abs(x-y) <= relTolerance*scale
}
