package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	yaml "go.yaml.in/yaml/v3"
)

// ErrHelp is returned when -h/--help was asked for; usage was printed.
var ErrHelp = pflag.ErrHelp

// FlagSet binds every `flag`-tagged field of cfg (a pointer to a struct) to a
// new flag set, plus --config. Field values at the time of the call are the
// defaults shown in help.
func FlagSet(name string, cfg any) (*pflag.FlagSet, *string, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = true
	configPath := fs.String("config", "", "YAML config file; flags given on the command line override it")
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, nil, fmt.Errorf("config: %T is not a pointer to a struct", cfg)
	}
	if err := bind(fs, v.Elem()); err != nil {
		return nil, nil, err
	}
	return fs, configPath, nil
}

// Load fills cfg from the file named by --config (if any) and args.
func Load(name string, cfg any, args []string) error {
	fs, configPath, err := FlagSet(name, cfg)
	if err != nil {
		return err
	}
	return Parse(fs, configPath, cfg, args)
}

// Parse parses args on fs (from FlagSet), then applies the config file under
// the flags the user set explicitly.
func Parse(fs *pflag.FlagSet, configPath *string, cfg any, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *configPath == "" {
		return nil
	}
	// Remember what the command line said, load the file over everything, then
	// say it again so flags win.
	type set struct{ name, value string }
	var explicit []set
	fs.Visit(func(f *pflag.Flag) {
		if f.Name == "config" {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, s := range sv.GetSlice() {
				explicit = append(explicit, set{f.Name, s})
			}
			return
		}
		explicit = append(explicit, set{f.Name, f.Value.String()})
	})
	if err := LoadFile(*configPath, cfg); err != nil {
		return err
	}
	reset := map[string]bool{}
	for _, e := range explicit {
		f := fs.Lookup(e.name)
		if sv, ok := f.Value.(pflag.SliceValue); ok && !reset[e.name] {
			reset[e.name] = true
			if err := sv.Replace([]string{e.value}); err != nil {
				return fmt.Errorf("--%s: %w", e.name, err)
			}
			continue
		}
		if err := f.Value.Set(e.value); err != nil {
			return fmt.Errorf("--%s: %w", e.name, err)
		}
	}
	return nil
}

// LoadFile decodes a YAML file strictly into cfg.
func LoadFile(path string, cfg any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, errEOF) || err.Error() == "EOF" {
			return nil // an empty file keeps the defaults
		}
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return fmt.Errorf("config file %s: %s", path, te.Errors[0])
		}
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

var errEOF = errors.New("EOF")

var (
	durationType = reflect.TypeFor[time.Duration]()
	mapType      = reflect.TypeFor[map[string]string]()
)

// inline reports whether f's yaml tag inlines it: a part's own config
// struct whose keys and flags are the service's.
func inline(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return slices.Contains(strings.Split(opts, ","), "inline")
}

func bind(fs *pflag.FlagSet, v reflect.Value) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && (f.Anonymous || inline(f)) {
			if err := bind(fs, fv); err != nil {
				return err
			}
			continue
		}
		name := f.Tag.Get("flag")
		if name == "" || !f.IsExported() {
			continue
		}
		usage := f.Tag.Get("usage")
		p := fv.Addr().Interface()
		switch {
		case f.Type == durationType:
			fs.DurationVar(p.(*time.Duration), name, fv.Interface().(time.Duration), usage)
		case f.Type == mapType:
			m, _ := fv.Interface().(map[string]string)
			fs.StringToStringVar(p.(*map[string]string), name, m, usage)
		default:
			switch f.Type.Kind() {
			case reflect.String:
				fs.StringVar(p.(*string), name, fv.String(), usage)
			case reflect.Bool:
				fs.BoolVar(p.(*bool), name, fv.Bool(), usage)
			case reflect.Int:
				fs.IntVar(p.(*int), name, int(fv.Int()), usage)
			case reflect.Int32:
				fs.Int32Var(p.(*int32), name, int32(fv.Int()), usage)
			case reflect.Int64:
				fs.Int64Var(p.(*int64), name, fv.Int(), usage)
			case reflect.Float64:
				fs.Float64Var(p.(*float64), name, fv.Float(), usage)
			case reflect.Float32:
				fs.Float32Var(p.(*float32), name, float32(fv.Float()), usage)
			case reflect.Slice:
				if f.Type.Elem().Kind() != reflect.String {
					return fmt.Errorf("config: field %s: unsupported slice type %s", f.Name, f.Type)
				}
				s, _ := fv.Interface().([]string)
				fs.StringSliceVar(p.(*[]string), name, s, usage)
			default:
				return fmt.Errorf("config: field %s: unsupported type %s", f.Name, f.Type)
			}
		}
	}
	return nil
}
