package lockgate;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * JSON text to Java values and back, for the gateway's documents: objects are
 * {@code Map<String, Object>} (in order), arrays {@code List<Object>}, integers
 * {@code Long} (or {@code BigInteger} past its range, so that no digit is
 * lost), other numbers {@code BigDecimal}, and {@code null} is {@code null}
 * (a member that is null is present in its map, one that is absent is not).
 */
final class Json {
    private Json() {}

    /** Reads one JSON value; {@link IllegalArgumentException} for anything else. */
    static Object parse(String text) {
        Reader reader = new Reader(text);
        reader.skipSpace();
        Object value = reader.value();
        reader.skipSpace();
        if (reader.at < text.length()) {
            throw reader.error("text after the value");
        }
        return value;
    }

    /** Reads a JSON object; {@link IllegalArgumentException} when the text is not one. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> parseObject(String text) {
        Object value = parse(text);
        if (!(value instanceof Map)) {
            throw new IllegalArgumentException("not a JSON object");
        }
        return (Map<String, Object>) value;
    }

    /** Writes a value made of maps, iterables, strings, numbers, booleans and null. */
    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    private static void write(Object value, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            quote((String) value, out);
        } else if (value instanceof Boolean || value instanceof Long || value instanceof Integer
                || value instanceof BigInteger || value instanceof BigDecimal) {
            out.append(value);
        } else if (value instanceof Map) {
            out.append('{');
            Iterator<? extends Map.Entry<?, ?>> entries = ((Map<?, ?>) value).entrySet().iterator();
            while (entries.hasNext()) {
                Map.Entry<?, ?> entry = entries.next();
                quote((String) entry.getKey(), out);
                out.append(':');
                write(entry.getValue(), out);
                if (entries.hasNext()) {
                    out.append(',');
                }
            }
            out.append('}');
        } else if (value instanceof Iterable) {
            out.append('[');
            Iterator<?> items = ((Iterable<?>) value).iterator();
            while (items.hasNext()) {
                write(items.next(), out);
                if (items.hasNext()) {
                    out.append(',');
                }
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("no JSON for a " + value.getClass().getName());
        }
    }

    private static void quote(String text, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    /** A recursive-descent reader of RFC 8259 JSON. */
    private static final class Reader {
        /** Deeper documents than this are refused, so that no input can overflow the stack. */
        private static final int MAX_DEPTH = 64;

        private final String text;
        private int at;
        private int depth;

        Reader(String text) {
            this.text = text;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("malformed JSON at " + at + ": " + what);
        }

        void skipSpace() {
            while (at < text.length()) {
                char c = text.charAt(at);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                at++;
            }
        }

        Object value() {
            if (at >= text.length()) {
                throw error("the text ended");
            }
            char c = text.charAt(at);
            switch (c) {
                case '{': return object();
                case '[': return array();
                case '"': return string();
                case 't': return word("true", Boolean.TRUE);
                case 'f': return word("false", Boolean.FALSE);
                case 'n': return word("null", null);
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return number();
                    }
                    throw error("unexpected " + c);
            }
        }

        private Object word(String word, Object value) {
            if (!text.startsWith(word, at)) {
                throw error("expected " + word);
            }
            at += word.length();
            return value;
        }

        private Map<String, Object> object() {
            enter();
            at++;
            Map<String, Object> members = new LinkedHashMap<>();
            skipSpace();
            if (peek() == '}') {
                at++;
                depth--;
                return members;
            }
            while (true) {
                skipSpace();
                if (peek() != '"') {
                    throw error("expected a member name");
                }
                String name = string();
                skipSpace();
                expect(':');
                skipSpace();
                members.put(name, value());
                skipSpace();
                char c = next();
                if (c == '}') {
                    depth--;
                    return members;
                }
                if (c != ',') {
                    throw error("expected , or }");
                }
            }
        }

        private List<Object> array() {
            enter();
            at++;
            List<Object> items = new ArrayList<>();
            skipSpace();
            if (peek() == ']') {
                at++;
                depth--;
                return items;
            }
            while (true) {
                skipSpace();
                items.add(value());
                skipSpace();
                char c = next();
                if (c == ']') {
                    depth--;
                    return items;
                }
                if (c != ',') {
                    throw error("expected , or ]");
                }
            }
        }

        private void enter() {
            if (++depth > MAX_DEPTH) {
                throw error("nested deeper than " + MAX_DEPTH);
            }
        }

        private String string() {
            at++;
            StringBuilder out = new StringBuilder();
            while (true) {
                char c = next();
                if (c == '"') {
                    return out.toString();
                }
                if (c < 0x20) {
                    throw error("a control character in a string");
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char escaped = next();
                switch (escaped) {
                    case '"': out.append('"'); break;
                    case '\\': out.append('\\'); break;
                    case '/': out.append('/'); break;
                    case 'b': out.append('\b'); break;
                    case 'f': out.append('\f'); break;
                    case 'n': out.append('\n'); break;
                    case 'r': out.append('\r'); break;
                    case 't': out.append('\t'); break;
                    case 'u':
                        if (at + 4 > text.length()) {
                            throw error("a short \\u escape");
                        }
                        try {
                            out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                        } catch (NumberFormatException e) {
                            throw error("a bad \\u escape");
                        }
                        at += 4;
                        break;
                    default:
                        throw error("a bad escape \\" + escaped);
                }
            }
        }

        private Object number() {
            int start = at;
            if (peek() == '-') {
                at++;
            }
            boolean integral = true;
            digits();
            if (at < text.length() && text.charAt(at) == '.') {
                integral = false;
                at++;
                digits();
            }
            if (at < text.length() && (text.charAt(at) == 'e' || text.charAt(at) == 'E')) {
                integral = false;
                at++;
                if (at < text.length() && (text.charAt(at) == '+' || text.charAt(at) == '-')) {
                    at++;
                }
                digits();
            }
            String literal = text.substring(start, at);
            if (!integral) {
                return new BigDecimal(literal);
            }
            BigInteger big = new BigInteger(literal);
            return big.bitLength() < 64 ? (Object) big.longValue() : big;
        }

        private void digits() {
            int start = at;
            while (at < text.length() && text.charAt(at) >= '0' && text.charAt(at) <= '9') {
                at++;
            }
            if (at == start) {
                throw error("expected a digit");
            }
        }

        private char peek() {
            if (at >= text.length()) {
                throw error("the text ended");
            }
            return text.charAt(at);
        }

        private char next() {
            char c = peek();
            at++;
            return c;
        }

        private void expect(char c) {
            if (next() != c) {
                throw error("expected " + c);
            }
        }
    }
}
