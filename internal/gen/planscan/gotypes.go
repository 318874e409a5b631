package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// The Go side is read from the package's source rather than by reflection
// on its types, so that the generator still builds when the file it
// writes is missing or broken.

// goKind is the shape of a Go field type the scan can decode into.
type goKind int

const (
	goString goKind = iota
	goBool
	goInt
	goInt64
	goStruct
	goSlice
	goRaw       // json.RawMessage
	goStringPtr // *string
	// goUnsupported is any other type: an error if the schema reaches it.
	goUnsupported goKind = -1
)

// goType is a field's type: its kind, how the source spells it (for
// goUnsupported, why not), and for a slice its element.
type goType struct {
	kind goKind
	src  string
	elem *goType
}

// goField is one field of a struct with the JSON name encoding/json uses.
type goField struct {
	name, json string
	typ        goType
}

// goStructs holds the struct types of a package, by name.
type goStructs map[string][]goField

// loadStructs parses the package in dir (but for its tests and skip).
func loadStructs(dir, skip string) (goStructs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	specs := map[string]*ast.StructType{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == skip {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, sp := range gd.Specs {
				ts := sp.(*ast.TypeSpec)
				if st, ok := ts.Type.(*ast.StructType); ok && ts.TypeParams == nil {
					specs[ts.Name.Name] = st
				}
			}
		}
	}
	out := goStructs{}
	for name, st := range specs {
		var fields []goField
		for _, f := range st.Fields.List {
			if len(f.Names) == 0 {
				return nil, fmt.Errorf("struct %s: embedded fields are not supported", name)
			}
			tag := ""
			if f.Tag != nil {
				tag, _ = strconv.Unquote(f.Tag.Value)
			}
			jname, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			for _, n := range f.Names {
				if !n.IsExported() || jname == "-" {
					continue
				}
				j := jname
				if j == "" {
					j = n.Name
				}
				// A type the scan cannot decode into is an error only if
				// the schema reaches the field.
				t, err := typeOf(f.Type, specs)
				if err != nil {
					t = goType{kind: goUnsupported, src: err.Error()}
				}
				fields = append(fields, goField{name: n.Name, json: j, typ: t})
			}
		}
		out[name] = fields
	}
	return out, nil
}

func typeOf(e ast.Expr, structs map[string]*ast.StructType) (goType, error) {
	switch e := e.(type) {
	case *ast.Ident:
		switch e.Name {
		case "string":
			return goType{kind: goString, src: "string"}, nil
		case "bool":
			return goType{kind: goBool, src: "bool"}, nil
		case "int":
			return goType{kind: goInt, src: "int"}, nil
		case "int64":
			return goType{kind: goInt64, src: "int64"}, nil
		}
		if _, ok := structs[e.Name]; ok {
			return goType{kind: goStruct, src: e.Name}, nil
		}
	case *ast.StarExpr:
		if id, ok := e.X.(*ast.Ident); ok && id.Name == "string" {
			return goType{kind: goStringPtr, src: "*string"}, nil
		}
	case *ast.ArrayType:
		if e.Len == nil {
			el, err := typeOf(e.Elt, structs)
			if err != nil {
				return goType{}, err
			}
			return goType{kind: goSlice, src: "[]" + el.src, elem: &el}, nil
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "json" && e.Sel.Name == "RawMessage" {
			return goType{kind: goRaw, src: "json.RawMessage"}, nil
		}
	}
	return goType{}, fmt.Errorf("type %s is not supported", types.ExprString(e))
}
