// Command planscan generates pkg/messages/planscan_gen.go, the
// schema-specific half of the plan scan: the functions that walk a plan
// document's objects, check each value as schemas/plan.schema.json says and
// decode it into the Go field whose json tag names it. The other half,
// planscan.go, is hand-written: the JSON lexer and the helpers that read,
// check and report one value, which the generated code calls.
//
// It runs from pkg/messages (go generate ./pkg/messages):
//
//	go run ../../internal/gen/planscan [-schema schemas/plan.schema.json] [-type Plan] [-o planscan_gen.go]
//
// It maps the schema's constructs one by one and refuses, naming it, any
// keyword or combination it has no code for, so that a schema change it
// cannot follow fails here rather than in the agreement tests.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("planscan: ")
	schema := flag.String("schema", "schemas/plan.schema.json", "the JSON Schema of the document")
	pkg := flag.String("pkg", ".", "the directory of the Go package the scan decodes into")
	root := flag.String("type", "Plan", "the Go type of the document")
	out := flag.String("o", "planscan_gen.go", "the file to write")
	flag.Parse()
	b, err := os.ReadFile(*schema)
	if err != nil {
		log.Fatal(err)
	}
	src, err := generate(config{schema: b, schemaName: *schema, pkgDir: *pkg, rootType: *root, out: *out})
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(fmt.Errorf("write: %w", err))
	}
}
