// The client's copy of the API against openapi/openapi.json: every JSON
// field of its wire types is a property of the schema it reads or writes,
// with a type it can read; the events and reasons it tells apart, and the
// problem slugs it maps to sentinels, are the document's. A change of the
// contract fails here instead of in a user's program.

package lockgate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

type openAPI struct {
	Paths      map[string]map[string]openAPIOperation
	Components struct {
		Schemas map[string]*jsonSchema
	}
}

type openAPIOperation struct {
	Responses map[string]struct {
		Description string
	}
}

type jsonSchema struct {
	Ref        string `json:"$ref"`
	Type       any
	Enum       []any
	Properties map[string]*jsonSchema
	Items      *jsonSchema
	OneOf      []*jsonSchema
	AnyOf      []*jsonSchema
	AllOf      []*jsonSchema
}

func loadOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "openapi", "openapi.json"))
	if err != nil {
		t.Fatalf("reading the API document: %v", err)
	}
	var document openAPI
	if err := json.Unmarshal(text, &document); err != nil {
		t.Fatalf("parsing the API document: %v", err)
	}
	return &document
}

// wireTypes are the client's copies of the document's schemas: each Go
// type, with the schemas its JSON may be (a field in any one of them).
var wireTypes = []struct {
	value   any
	schemas []string
}{
	{acquireBody{}, []string{"AcquireBody"}},
	{grant{}, []string{"LockGrant"}},
	{leaseState{}, []string{"LeaseRenewal"}},
	{batchBody{}, []string{"BatchBody"}},
	{batchLockBody{}, []string{"BatchLockBody"}},
	{batchGrant{}, []string{"BatchGrant"}},
	{HeldLock{}, []string{"BatchGrantLock"}},
	{sessionBody{}, []string{"SessionBody"}},
	{sessionGrant{}, []string{"SessionGrant"}},
	{lockStatusWire{}, []string{"LockStatus", "FreeLock"}},
	{lockListWire{}, []string{"LockList"}},
	{streamNews{}, []string{"RenewedEvent", "ReleasedEvent", "LostEvent", "SessionRenewedEvent", "SessionEndedEvent"}},
}

func TestTheWireTypesAreTheDocumentsSchemas(t *testing.T) {
	document := loadOpenAPI(t)
	for _, wire := range wireTypes {
		var schemas []*jsonSchema
		for _, name := range wire.schemas {
			schema := document.Components.Schemas[name]
			if schema == nil {
				t.Errorf("%T: no schema %s", wire.value, name)
				continue
			}
			schemas = append(schemas, schema)
		}
		for _, problem := range structProblems(document, reflect.TypeOf(wire.value), schemas) {
			t.Error(problem)
		}
	}
}

// structProblems is what in the Go struct the schemas do not back.
func structProblems(document *openAPI, goType reflect.Type, schemas []*jsonSchema) []string {
	var problems []string
	for i := 0; i < goType.NumField(); i++ {
		field := goType.Field(i)
		name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		where := fmt.Sprintf("%v.%s (%q)", goType, field.Name, name)
		found := false
		for _, schema := range schemas {
			property := schema.Properties[name]
			if property == nil {
				continue
			}
			found = true
			problems = append(problems, fieldProblems(document, where, field.Type, property)...)
		}
		if !found {
			problems = append(problems, where+": no such property in the document")
		}
	}
	return problems
}

// fieldProblems is whether every value the document allows for property
// is one the Go type reads (null aside: it reads as the zero value).
func fieldProblems(document *openAPI, where string, goType reflect.Type, property *jsonSchema) []string {
	for goType.Kind() == reflect.Pointer {
		goType = goType.Elem()
	}
	var problems []string
	for _, alternative := range alternatives(document, property) {
		types := schemaTypes(alternative)
		for _, kind := range types {
			if kind != "null" && kind != jsonKind(goType) {
				problems = append(problems, fmt.Sprintf("%s: the client reads %v, the document allows %s", where, goType, kind))
			}
		}
		switch {
		case goType.Kind() == reflect.Slice && alternative.Items != nil && goType.Elem().Kind() == reflect.Struct:
			// A wire type of its own is checked against its own schemas.
			if names := schemasOf(goType.Elem()); names != nil {
				if item := strings.TrimPrefix(alternative.Items.Ref, "#/components/schemas/"); !contains(names, item) {
					problems = append(problems, fmt.Sprintf("%s: the items are %q, the client reads them as %v", where, item, names))
				}
				continue
			}
			problems = append(problems, structProblems(document, goType.Elem(), alternatives(document, alternative.Items))...)
		case goType.Kind() == reflect.Struct && len(alternative.Properties) > 0:
			problems = append(problems, structProblems(document, goType, []*jsonSchema{alternative})...)
		}
	}
	return problems
}

// schemasOf is the schemas of a wire type (nil for another type).
func schemasOf(goType reflect.Type) []string {
	for _, wire := range wireTypes {
		if reflect.TypeOf(wire.value) == goType {
			return wire.schemas
		}
	}
	return nil
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// alternatives are the schemas a value of schema may match, references
// resolved.
func alternatives(document *openAPI, schema *jsonSchema) []*jsonSchema {
	if schema.Ref != "" {
		return alternatives(document, document.Components.Schemas[strings.TrimPrefix(schema.Ref, "#/components/schemas/")])
	}
	var all []*jsonSchema
	for _, group := range [][]*jsonSchema{schema.OneOf, schema.AnyOf, schema.AllOf} {
		for _, alternative := range group {
			all = append(all, alternatives(document, alternative)...)
		}
	}
	if schema.Type != nil || len(all) == 0 {
		all = append(all, schema)
	}
	return all
}

func schemaTypes(schema *jsonSchema) []string {
	switch kind := schema.Type.(type) {
	case string:
		return []string{kind}
	case []any:
		var kinds []string
		for _, k := range kind {
			kinds = append(kinds, fmt.Sprint(k))
		}
		return kinds
	}
	return nil
}

func jsonKind(goType reflect.Type) string {
	switch goType.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "integer"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return goType.String()
}

// enum is the values of a string enumeration of the document.
func enum(t *testing.T, document *openAPI, name string) map[string]bool {
	t.Helper()
	schema := document.Components.Schemas[name]
	if schema == nil {
		t.Fatalf("no schema %s", name)
	}
	values := make(map[string]bool)
	for _, value := range schema.Enum {
		values[fmt.Sprint(value)] = true
	}
	return values
}

func TestTheEventsAndReasonsTheClientTellsApartAreTheDocuments(t *testing.T) {
	document := loadOpenAPI(t)
	streamEvents := enum(t, document, "LockStreamEventName")
	for _, event := range []string{"queued", "refused", "acquired", "renewed"} {
		if !streamEvents[event] {
			t.Errorf("the stream event %q is not the document's", event)
		}
	}
	for event := range lastEvents {
		// `ended` is a session's: its stream's events have no schema of their own.
		if event != "ended" && !streamEvents[event] {
			t.Errorf("the last event %q is not the document's", event)
		}
	}

	reasons := enum(t, document, "LostReasonText")
	gateways := []string{ReasonLockGone, ReasonHeldByAnother, ReasonBackendUnavailable, ReasonRevoked,
		ReasonShuttingDown, ReasonSessionEnded}
	for _, reason := range gateways {
		if !reasons[reason] {
			t.Errorf("the lost reason %q is not the document's", reason)
		}
		delete(reasons, reason)
	}
	for reason := range reasons {
		t.Errorf("the document's lost reason %q has no Reason constant", reason)
	}

	watchEvents := enum(t, document, "LockWatchEventName")
	for _, event := range []EventType{EventSnapshot, EventAcquired, EventValue, EventMode, EventReleased,
		EventExpired, EventRevoked, EventGap, EventDelayed} {
		if !watchEvents[string(event)] {
			t.Errorf("the watch event %q is not the document's", event)
		}
		delete(watchEvents, string(event))
	}
	for event := range watchEvents {
		t.Errorf("the document's watch event %q has no EventType constant", event)
	}
}

// undocumentedSlugs are the slugs the client maps that the document lists
// on no route: `internal` is any route's 500, which the status alone
// makes ErrUnavailable.
var undocumentedSlugs = map[string]bool{"internal": true}

func TestTheProblemSlugsTheClientMapsAreTheDocuments(t *testing.T) {
	document := loadOpenAPI(t)
	// Each route's refusals are described as "`slug`: what it means".
	described := regexp.MustCompile("(?m)(?:^|\\n)`([a-z][a-z-]*)`: ")
	statuses := make(map[string]map[string]bool)
	for _, operations := range document.Paths {
		for _, operation := range operations {
			for status, response := range operation.Responses {
				for _, match := range described.FindAllStringSubmatch(response.Description, -1) {
					if statuses[match[1]] == nil {
						statuses[match[1]] = make(map[string]bool)
					}
					statuses[match[1]][status] = true
				}
			}
		}
	}
	if len(statuses) < 10 {
		t.Fatalf("only %d problem slugs found in the document: %v", len(statuses), statuses)
	}
	for slug, sentinel := range sentinelBySlug {
		if undocumentedSlugs[slug] {
			continue
		}
		if statuses[slug] == nil {
			t.Errorf("the client maps %q, which no route of the document answers", slug)
			continue
		}
		for status := range statuses[slug] {
			unavailable := status >= "500" || status == "429"
			if (sentinel == ErrUnavailable) != unavailable {
				t.Errorf("%q is answered with %s, and the client takes it for %v", slug, status, sentinel)
			}
		}
	}
	var slugs []string
	for slug := range statuses {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	t.Logf("the document's problem slugs: %v", slugs)
}
