package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

/**
 * The client's copy of the API against {@code openapi/openapi.json}: every
 * component of the records it decodes and sends ({@link Api}) is a field of
 * the schema of the same name, with a type it can read (or that the schema
 * takes), null where the schema allows null; every enumeration value it names
 * is the document's; every problem slug it tells apart is one the document
 * lists, with the status the client expects. And the check itself finds each
 * kind of drift in a changed copy of the document.
 */
class ContractTest {
    /**
     * What the client reads that the gateway sends but the document does not
     * describe yet, each let through by its exact text; the second test fails
     * once the document has it, so that the entry goes.
     */
    private static final Map<String, String> UNDOCUMENTED = Map.of();

    @SuppressWarnings("unchecked")
    static Map<String, Object> document() throws IOException {
        return (Map<String, Object>) Json.parse(Files.readString(Servers.repository().resolve("openapi/openapi.json")));
    }

    @Test
    void the_clients_types_and_slugs_are_the_documents() throws IOException {
        List<String> problems = violations(document());
        problems.removeAll(UNDOCUMENTED.keySet());
        assertEquals(List.of(), problems);
        // Not vacuous: the client names these, and the document has them.
        assertTrue(Api.DOCUMENTS.size() >= 30);
        assertTrue(documentedSlugs(document()).keySet().containsAll(Problems.BY_SLUG.keySet()));
    }

    @Test
    void what_the_document_lacks_is_named_only_where_the_list_says() throws IOException {
        List<String> problems = violations(document());
        List<String> fixed = UNDOCUMENTED.keySet().stream().filter(gap -> !problems.contains(gap)).toList();
        assertEquals(List.of(), fixed, "the document has these now: take them off UNDOCUMENTED");
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "field renamed|LockGrant.fencing_token: no such field",
        "type changed|RenewedEvent.expires_at_ms: the client reads long",
        "made nullable|LeaseEntry.holds: may be absent or null in the document",
        "made optional|LockGrant.token: may be absent or null in the document",
        "sent field required|ModeBody.wait_ms: the client may leave it out, but the document requires it",
        "mode dropped|LockStatus.mode: the document has a value the client cannot read",
        "stream event dropped|LockEvent: \"renewed\" is not in LockStreamEventName",
        "watch event dropped|Type: \"delayed\" is not in LockWatchEventName",
        "loss reason added|LossReason: the document's lost reason \"stolen\" is unknown here",
        "slug renamed|problem lock-held: not in the document",
        "slug status changed|problem deadlock: answered with [423] in the document, not 409",
    })
    @SuppressWarnings("unchecked")
    void a_change_of_the_contract_fails(String change, String complaint) throws IOException {
        Map<String, Object> document = document();
        Map<String, Object> schemas = (Map<String, Object>) ((Map<String, Object>) document.get("components"))
                .get("schemas");
        switch (change) {
            case "field renamed": {
                Map<String, Object> grant = properties(schemas, "LockGrant");
                grant.put("fence", grant.remove("fencing_token"));
                break;
            }
            case "type changed":
                properties(schemas, "RenewedEvent").put("expires_at_ms", new LinkedHashMap<>(Map.of("type", "string")));
                break;
            case "made nullable":
                ((Map<String, Object>) properties(schemas, "LeaseEntry").get("holds")).put("type",
                        List.of("integer", "null"));
                break;
            case "made optional":
                ((List<Object>) ((Map<String, Object>) schemas.get("LockGrant")).get("required")).remove("token");
                break;
            case "sent field required":
                ((List<Object>) ((Map<String, Object>) schemas.get("ModeBody")).get("required")).add("wait_ms");
                break;
            case "mode dropped":
                ((Map<String, Object>) schemas.get("LockModeText")).put("enum", List.of("exclusive", "shared",
                        "sideways"));
                break;
            case "stream event dropped":
                ((List<Object>) ((Map<String, Object>) schemas.get("LockStreamEventName")).get("enum")).remove("renewed");
                break;
            case "watch event dropped":
                ((List<Object>) ((Map<String, Object>) schemas.get("LockWatchEventName")).get("enum")).remove("delayed");
                break;
            case "loss reason added":
                ((List<Object>) ((Map<String, Object>) schemas.get("LostReasonText")).get("enum")).add("stolen");
                break;
            case "slug renamed":
            case "slug status changed":
                for (Object operations : ((Map<String, Object>) document.get("paths")).values()) {
                    for (Object operation : ((Map<String, Object>) operations).values()) {
                        Map<String, Object> responses = (Map<String, Object>) ((Map<String, Object>) operation)
                                .getOrDefault("responses", Map.of());
                        for (Map.Entry<String, Object> response : new ArrayList<>(responses.entrySet())) {
                            Map<String, Object> body = (Map<String, Object>) response.getValue();
                            String text = (String) body.getOrDefault("description", "");
                            if (change.equals("slug renamed")) {
                                body.put("description", text.replace("`lock-held`:", "`lock-busy`:"));
                            } else if (text.contains("`deadlock`:")) {
                                body.put("description", text.replace("`deadlock`:", "`other`:"));
                                responses.put("423", new LinkedHashMap<>(Map.of("description", "`deadlock`: moved")));
                            }
                        }
                    }
                }
                break;
            default:
                throw new IllegalArgumentException(change);
        }
        List<String> problems = violations(document);
        assertTrue(problems.stream().anyMatch(p -> p.startsWith(complaint)), () -> complaint + " in " + problems);
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> properties(Map<String, Object> schemas, String name) {
        return (Map<String, Object>) ((Map<String, Object>) schemas.get(name)).get("properties");
    }

    // ---- The check

    @SuppressWarnings("unchecked")
    static List<String> violations(Map<String, Object> document) {
        Map<String, Object> schemas = (Map<String, Object>) ((Map<String, Object>) document.get("components"))
                .get("schemas");
        Checker checker = new Checker(schemas);
        for (Class<? extends Record> record : Api.DOCUMENTS) {
            checker.record(record);
        }
        checker.namedValues(Api.LockEvent.class, "LockStreamEventName");
        List<WatchEvent.Type> watched = new ArrayList<>(EnumSet.allOf(WatchEvent.Type.class));
        watched.remove(WatchEvent.Type.OTHER);
        checker.values("Type", watched.stream().map(WatchEvent.Type::wire).toList(), "LockWatchEventName");
        checker.readsAll("LockMode", wires(LockMode.values()), "LockModeText");
        checker.sameAs("LossReason", "the document's lost reason", wires(LossReason.LOCK_STREAM),
                checker.enumValues("LostReasonText"));
        checker.sameAs("LossReason", "the document's session end reason", wires(LossReason.SESSION_STREAM),
                words(schemas, "SessionEndedEvent", "reason"));
        List<String> problems = new ArrayList<>(checker.problems);
        Map<String, Set<Integer>> slugs = documentedSlugs(document);
        for (Map.Entry<String, Problems.Kind> slug : new TreeMap<>(Problems.BY_SLUG).entrySet()) {
            Set<Integer> statuses = slugs.get(slug.getKey());
            if (statuses == null) {
                problems.add("problem " + slug.getKey() + ": not in the document");
            } else if (!statuses.contains(slug.getValue().status())) {
                problems.add("problem " + slug.getKey() + ": answered with " + new TreeSet<>(statuses)
                        + " in the document, not " + slug.getValue().status());
            }
        }
        return problems;
    }

    private static List<String> wires(Wire.Named[] values) {
        return Arrays.stream(values).map(Wire.Named::wire).toList();
    }

    private static List<String> wires(Set<LossReason> values) {
        return values.stream().map(LossReason::wire).toList();
    }

    /** The words in backquotes of a schema's field's description, such as a string's documented values. */
    @SuppressWarnings("unchecked")
    private static List<String> words(Map<String, Object> schemas, String schema, String field) {
        Map<String, Object> property = (Map<String, Object>) properties(schemas, schema).get(field);
        Matcher m = Pattern.compile("`([^`]+)`").matcher((String) property.getOrDefault("description", ""));
        List<String> found = new ArrayList<>();
        while (m.find()) {
            found.add(m.group(1));
        }
        return found;
    }

    /** Each problem slug the document's answers name ("`slug`: what it means"), with its statuses. */
    @SuppressWarnings("unchecked")
    static Map<String, Set<Integer>> documentedSlugs(Map<String, Object> document) {
        Map<String, Set<Integer>> slugs = new TreeMap<>();
        Pattern slug = Pattern.compile("(?:^|\\n\\n)`([a-z-]+)`:");
        for (Object operations : ((Map<String, Object>) document.get("paths")).values()) {
            for (Object operation : ((Map<String, Object>) operations).values()) {
                Map<String, Object> responses = (Map<String, Object>) ((Map<String, Object>) operation)
                        .getOrDefault("responses", Map.of());
                for (Map.Entry<String, Object> response : responses.entrySet()) {
                    Matcher m = slug.matcher((String) ((Map<String, Object>) response.getValue())
                            .getOrDefault("description", ""));
                    while (m.find()) {
                        slugs.computeIfAbsent(m.group(1), s -> new LinkedHashSet<>())
                                .add(Integer.parseInt(response.getKey()));
                    }
                }
            }
        }
        return slugs;
    }

    /** Compares the client's records with the document's schemas. */
    private static final class Checker {
        final Map<String, Object> schemas;
        final List<String> problems = new ArrayList<>();

        Checker(Map<String, Object> schemas) {
            this.schemas = schemas;
        }

        @SuppressWarnings("unchecked")
        void record(Class<? extends Record> record) {
            Wire.Schema named = record.getAnnotation(Wire.Schema.class);
            String name = record.getSimpleName();
            Map<String, Object> schema = (Map<String, Object>) schemas.get(named.value());
            if (schema == null) {
                problems.add(name + ": no schema " + named.value());
                return;
            }
            Map<String, Object> properties = (Map<String, Object>) schema.getOrDefault("properties", Map.of());
            List<Object> required = (List<Object>) schema.getOrDefault("required", List.of());
            for (RecordComponent component : record.getRecordComponents()) {
                String field = Wire.wireName(component.getName());
                String where = name + "." + field;
                Map<String, Object> property = (Map<String, Object>) properties.get(field);
                if (property == null) {
                    problems.add(where + ": no such field in " + named.value());
                    continue;
                }
                boolean nullable = component.isAnnotationPresent(Wire.Nullable.class);
                List<Map<String, Object>> options = alternatives(property);
                boolean documentNull = options.stream().anyMatch(o -> "null".equals(o.get("type")));
                if (named.sent()) {
                    if (nullable && required.contains(field)) {
                        problems.add(where + ": the client may leave it out, but the document requires it");
                    }
                } else if ((documentNull || !required.contains(field)) && !nullable) {
                    problems.add(where + ": may be absent or null in the document, not in the client");
                }
                for (Map<String, Object> option : options) {
                    if (!"null".equals(option.get("type"))) {
                        check(component.getGenericType(), option, where, named.sent());
                    }
                }
            }
        }

        /** Whether every value {@code option} allows is one {@code type} reads (or, sent, the reverse). */
        @SuppressWarnings("unchecked")
        private void check(Type type, Map<String, Object> option, String where, boolean sent) {
            Class<?> raw = Wire.rawClass(type);
            Object kind = option.get("type");
            String shown = raw.getSimpleName() + (raw == List.class ? "<>" : "");
            if (raw == String.class && "string".equals(kind)) {
                return;
            }
            if ((raw == long.class || raw == Long.class) && "integer".equals(kind)) {
                return;
            }
            if ((raw == int.class || raw == Integer.class) && "integer".equals(kind)
                    && "int32".equals(option.get("format"))) {
                return;
            }
            if ((raw == boolean.class || raw == Boolean.class) && "boolean".equals(kind)) {
                return;
            }
            if (raw == List.class && "array".equals(kind)) {
                Type item = ((ParameterizedType) type).getActualTypeArguments()[0];
                for (Map<String, Object> items : alternatives((Map<String, Object>) option.get("items"))) {
                    check(item, items, where + "[]", sent);
                }
                return;
            }
            if (raw.isRecord() && option.containsKey("$schema-name")) {
                String named = raw.getAnnotation(Wire.Schema.class).value();
                if (named.equals(option.get("$schema-name"))) {
                    return;
                }
            }
            if (raw.isEnum() && "string".equals(kind) && option.get("enum") instanceof List) {
                Set<Object> ours = new LinkedHashSet<>(wires((Wire.Named[]) raw.getEnumConstants()));
                List<Object> theirs = (List<Object>) option.get("enum");
                if (sent ? theirs.containsAll(ours) : ours.containsAll(theirs)) {
                    return;
                }
                problems.add(where + ": " + (sent ? "the client sends a value the document does not take"
                        : "the document has a value the client cannot read") + ": " + theirs + " / " + ours);
                return;
            }
            problems.add(where + ": the client reads " + shown.replace("Long", "long").replace("Integer", "int")
                    + ", the document has " + describe(option));
        }

        private static String describe(Map<String, Object> option) {
            Map<String, Object> shown = new TreeMap<>(option);
            shown.remove("description");
            shown.remove("example");
            return Json.write(shown);
        }

        /** The schemas a value may match: through $ref (remembering the name), oneOf, anyOf and type lists. */
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> alternatives(Map<String, Object> property) {
            if (property.containsKey("$ref")) {
                String name = ((String) property.get("$ref")).replace("#/components/schemas/", "");
                List<Map<String, Object>> resolved = new ArrayList<>();
                for (Map<String, Object> option : alternatives((Map<String, Object>) schemas.get(name))) {
                    Map<String, Object> named = new LinkedHashMap<>(option);
                    named.putIfAbsent("$schema-name", name);
                    resolved.add(named);
                }
                return resolved;
            }
            for (String combinator : new String[] {"oneOf", "anyOf"}) {
                if (property.containsKey(combinator)) {
                    List<Map<String, Object>> all = new ArrayList<>();
                    for (Object part : (List<Object>) property.get(combinator)) {
                        all.addAll(alternatives((Map<String, Object>) part));
                    }
                    return all;
                }
            }
            Object kinds = property.get("type");
            if (kinds instanceof List) {
                List<Map<String, Object>> all = new ArrayList<>();
                for (Object kind : (List<Object>) kinds) {
                    Map<String, Object> one = new LinkedHashMap<>(property);
                    one.put("type", kind);
                    all.add(one);
                }
                return all;
            }
            return List.of(property);
        }

        @SuppressWarnings("unchecked")
        List<Object> enumValues(String schema) {
            return (List<Object>) ((Map<String, Object>) schemas.get(schema)).getOrDefault("enum", List.of());
        }

        /** Every value the client names is one of the schema's. */
        void namedValues(Class<? extends Wire.Named> type, String schema) {
            values(type.getSimpleName(), wires(type.getEnumConstants()), schema);
        }

        void values(String name, List<String> ours, String schema) {
            List<Object> theirs = enumValues(schema);
            for (String value : ours) {
                if (!theirs.contains(value)) {
                    problems.add(name + ": \"" + value + "\" is not in " + schema);
                }
            }
        }

        /** The client can read every value of the schema, and names no other. */
        void readsAll(String name, List<String> ours, String schema) {
            values(name, ours, schema);
            for (Object value : enumValues(schema)) {
                if (!ours.contains(value)) {
                    problems.add(name + ": \"" + value + "\" of " + schema + " is unknown here");
                }
            }
        }

        /** The client's set of a kind of value is the document's. */
        void sameAs(String name, String what, List<String> ours, List<?> theirs) {
            for (Object value : theirs) {
                if (!ours.contains(value)) {
                    problems.add(name + ": " + what + " \"" + value + "\" is unknown here");
                }
            }
            for (String value : ours) {
                if (!theirs.contains(value)) {
                    problems.add(name + ": \"" + value + "\" is not " + what);
                }
            }
        }
    }

}
