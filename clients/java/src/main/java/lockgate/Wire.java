package lockgate;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The gateway's JSON documents as Java records, one record per schema of
 * {@code openapi/openapi.json} (see {@link Api}): a component {@code
 * fencingToken} is the member {@code fencing_token}. Decoding refuses a
 * document that lacks a member the record needs (a primitive, or a reference
 * not marked {@link Nullable}); encoding leaves out null components. The
 * contract test reads the same records, so the types the client decodes are
 * the types it is checked for.
 */
final class Wire {
    private Wire() {}

    /** The schema of {@code openapi/openapi.json} a record stands for. */
    @Retention(RetentionPolicy.RUNTIME)
    @Target(ElementType.TYPE)
    @interface Schema {
        String value();

        /** A request body: the client sends it, and may send less than the schema takes. */
        boolean sent() default false;
    }

    /** A component that may be absent or null on the wire. */
    @Retention(RetentionPolicy.RUNTIME)
    @Target(ElementType.RECORD_COMPONENT)
    @interface Nullable {}

    /** An enumeration whose constants have a name on the wire. */
    interface Named {
        String wire();
    }

    /** {@code fencingToken} as the wire spells it: {@code fencing_token}. */
    static String wireName(String component) {
        StringBuilder out = new StringBuilder();
        for (char c : component.toCharArray()) {
            if (Character.isUpperCase(c)) {
                out.append('_').append(Character.toLowerCase(c));
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }

    /** Reads a JSON document into a record; {@link IllegalArgumentException} when it does not fit. */
    static <R extends Record> R decode(String text, Class<R> type) {
        return decode(Json.parse(text), type);
    }

    /** Reads a parsed JSON value into a record; {@link IllegalArgumentException} when it does not fit. */
    static <R extends Record> R decode(Object json, Class<R> type) {
        return type.cast(value(json, type, type.getSimpleName()));
    }

    /** The record as a JSON object (its null components left out). */
    static Map<String, Object> encode(Record record) {
        Map<String, Object> members = new LinkedHashMap<>();
        for (RecordComponent component : record.getClass().getRecordComponents()) {
            Object value;
            try {
                value = component.getAccessor().invoke(record);
            } catch (IllegalAccessException | InvocationTargetException e) {
                throw new IllegalStateException("reading " + component, e);
            }
            if (value != null) {
                members.put(wireName(component.getName()), plain(value));
            }
        }
        return members;
    }

    private static Object plain(Object value) {
        if (value instanceof Record) {
            return encode((Record) value);
        }
        if (value instanceof Named) {
            return ((Named) value).wire();
        }
        if (value instanceof List) {
            List<Object> items = new ArrayList<>();
            for (Object item : (List<?>) value) {
                items.add(plain(item));
            }
            return items;
        }
        return value;
    }

    private static Object value(Object json, Type type, String where) {
        Class<?> raw = rawClass(type);
        if (raw.isRecord()) {
            if (!(json instanceof Map)) {
                throw mismatch(where, "an object", json);
            }
            return record((Map<?, ?>) json, raw, where);
        }
        if (raw == String.class) {
            if (!(json instanceof String)) {
                throw mismatch(where, "a string", json);
            }
            return json;
        }
        if (raw == long.class || raw == Long.class) {
            if (!(json instanceof Long)) {
                throw mismatch(where, "an integer of 64 bits", json);
            }
            return json;
        }
        if (raw == int.class || raw == Integer.class) {
            if (!(json instanceof Long) || (Long) json != ((Long) json).intValue()) {
                throw mismatch(where, "an integer of 32 bits", json);
            }
            return ((Long) json).intValue();
        }
        if (raw == boolean.class || raw == Boolean.class) {
            if (!(json instanceof Boolean)) {
                throw mismatch(where, "true or false", json);
            }
            return json;
        }
        if (raw == List.class) {
            if (!(json instanceof List)) {
                throw mismatch(where, "an array", json);
            }
            Type item = ((ParameterizedType) type).getActualTypeArguments()[0];
            List<Object> items = new ArrayList<>();
            for (Object element : (List<?>) json) {
                items.add(value(element, item, where + "[]"));
            }
            return List.copyOf(items);
        }
        if (raw == Map.class) {
            if (!(json instanceof Map)) {
                throw mismatch(where, "an object", json);
            }
            return json;
        }
        if (raw.isEnum() && Named.class.isAssignableFrom(raw)) {
            if (!(json instanceof String)) {
                throw mismatch(where, "a string", json);
            }
            return named(raw, (String) json, where);
        }
        throw new IllegalStateException(where + ": no wire form for " + type);
    }

    private static Object named(Class<?> type, String wire, String where) {
        Object other = null;
        for (Object constant : type.getEnumConstants()) {
            if (((Named) constant).wire().equals(wire)) {
                return constant;
            }
            if (((Enum<?>) constant).name().equals("OTHER")) {
                other = constant;
            }
        }
        if (other == null) {
            throw new IllegalArgumentException(where + ": unknown value \"" + wire + "\"");
        }
        return other;
    }

    private static Object record(Map<?, ?> members, Class<?> type, String where) {
        RecordComponent[] components = type.getRecordComponents();
        Object[] values = new Object[components.length];
        Class<?>[] types = new Class<?>[components.length];
        for (int i = 0; i < components.length; i++) {
            RecordComponent component = components[i];
            types[i] = component.getType();
            String name = wireName(component.getName());
            Object json = members.get(name);
            String at = where + "." + name;
            if (json == null) {
                if (component.getType().isPrimitive() || !component.isAnnotationPresent(Nullable.class)) {
                    throw new IllegalArgumentException(at + ": missing");
                }
                continue;
            }
            values[i] = value(json, component.getGenericType(), at);
        }
        try {
            Constructor<?> constructor = type.getDeclaredConstructor(types);
            return constructor.newInstance(values);
        } catch (InvocationTargetException e) {
            throw new IllegalArgumentException(where + ": " + e.getCause().getMessage(), e.getCause());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("making a " + type.getName(), e);
        }
    }

    static Class<?> rawClass(Type type) {
        if (type instanceof Class) {
            return (Class<?>) type;
        }
        if (type instanceof ParameterizedType) {
            return (Class<?>) ((ParameterizedType) type).getRawType();
        }
        throw new IllegalStateException("no class for " + type);
    }

    private static IllegalArgumentException mismatch(String where, String expected, Object json) {
        String found = json == null ? "null" : json instanceof String ? "a string" : json.getClass().getSimpleName();
        return new IllegalArgumentException(where + ": expected " + expected + ", found " + found);
    }
}
