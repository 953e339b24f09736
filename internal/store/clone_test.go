package store

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var timeOne = time.Unix(1, 0).UTC()

// fill sets every field reachable from v to a value that is not its zero value.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		if v.Type().PkgPath() == "time" { // time.Time: no exported fields to reach
			v.Set(reflect.ValueOf(timeOne))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+"[key]")
		fill(t, e, path+"[elem]")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), path)
		v.Set(p)
	default:
		if !setScalar(v, 1) {
			t.Fatalf("%s: kind %s: teach this test to fill it, and Clone to copy it", path, v.Kind())
		}
	}
}

// Clone shares nothing with its source: changing anything the source reaches (a map,
// a slice, a pointed-to struct), field by field, leaves the clone as it was. A field
// added to Sandbox later is filled and changed here too, so one Clone forgets fails.
func TestSandboxCloneSharesNothing(t *testing.T) {
	var sb Sandbox
	fill(t, reflect.ValueOf(&sb).Elem(), "Sandbox")
	c := sb.Clone()
	if !reflect.DeepEqual(&sb, c) {
		t.Fatalf("clone differs from its source:\n got %+v\nwant %+v", c, &sb)
	}
	var orig Sandbox
	fill(t, reflect.ValueOf(&orig).Elem(), "Sandbox") // what the clone must still equal
	refill(reflect.ValueOf(&sb).Elem())
	if !reflect.DeepEqual(&orig, c) {
		t.Errorf("changing the source changed the clone:\n got %+v\nwant %+v", c, &orig)
	}
}

// refill changes, in place, every value reachable through v's maps, slices and pointers.
func refill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return
		}
		for i := range v.NumField() {
			refill(v.Field(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			change(e)
			v.SetMapIndex(k, e)
		}
	case reflect.Slice:
		for i := range v.Len() {
			change(v.Index(i))
		}
	case reflect.Pointer:
		change(v.Elem())
	}
}

// change makes v (reached through a reference) differ from what fill set.
func change(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			change(v.Field(i))
		}
	default:
		if !setScalar(v, 2) {
			refill(v)
		}
	}
}

// setScalar sets a string, bool or number to a value that n (1 or 2) picks, and says
// whether v was one.
func setScalar(v reflect.Value, n int) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.Repeat("x", n))
	case reflect.Bool:
		v.SetBool(n == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(n))
	default:
		return false
	}
	return true
}
