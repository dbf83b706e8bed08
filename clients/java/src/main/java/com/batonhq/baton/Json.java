package com.batonhq.baton;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A minimal JSON reader and writer (RFC 8259) for the sidecar's answers and requests.
 * Objects read as {@code LinkedHashMap<String,Object>}, arrays as {@code ArrayList<Object>},
 * integers as {@link Long} (or {@link BigInteger} past 64 bits), other numbers as {@link Double},
 * {@code null} as {@code null}. Unknown members are kept, never refused: callers pick the ones they know.
 */
final class Json {
    private Json() {}

    /** A JSON text written as is by {@link #write} (for an op's payload). */
    record Raw(String json) {}

    /** Parses one JSON value; trailing non-space characters are an error. */
    static Object parse(String s) {
        Parser p = new Parser(s);
        p.space();
        Object v = p.value(0);
        p.space();
        if (p.i != s.length()) {
            throw p.error("unexpected characters after the value");
        }
        return v;
    }

    /** Parses a JSON object; anything else is an error. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> parseObject(String s) {
        Object v = parse(s);
        if (!(v instanceof Map)) {
            throw new IllegalArgumentException("json: expected an object, got " + kind(v));
        }
        return (Map<String, Object>) v;
    }

    static String kind(Object v) {
        if (v == null) return "null";
        if (v instanceof Map) return "object";
        if (v instanceof List) return "array";
        if (v instanceof String) return "string";
        if (v instanceof Boolean) return "boolean";
        return "number";
    }

    private static final class Parser {
        final String s;
        int i;

        Parser(String s) {
            this.s = s;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("json: " + what + " at offset " + i);
        }

        void space() {
            while (i < s.length()) {
                char c = s.charAt(i);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
                i++;
            }
        }

        Object value(int depth) {
            if (depth > 512) throw error("nesting too deep");
            if (i >= s.length()) throw error("unexpected end of input");
            char c = s.charAt(i);
            switch (c) {
                case '{': return object(depth);
                case '[': return array(depth);
                case '"': return string();
                case 't': return literal("true", Boolean.TRUE);
                case 'f': return literal("false", Boolean.FALSE);
                case 'n': return literal("null", null);
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) return number();
                    throw error("unexpected character '" + c + "'");
            }
        }

        Object literal(String word, Object v) {
            if (!s.startsWith(word, i)) throw error("invalid literal");
            i += word.length();
            return v;
        }

        Map<String, Object> object(int depth) {
            Map<String, Object> m = new LinkedHashMap<>();
            i++; // {
            space();
            if (i < s.length() && s.charAt(i) == '}') {
                i++;
                return m;
            }
            while (true) {
                space();
                if (i >= s.length() || s.charAt(i) != '"') throw error("expected a member name");
                String k = string();
                space();
                if (i >= s.length() || s.charAt(i) != ':') throw error("expected ':'");
                i++;
                space();
                m.put(k, value(depth + 1));
                space();
                if (i >= s.length()) throw error("unexpected end of input in an object");
                char c = s.charAt(i++);
                if (c == '}') return m;
                if (c != ',') throw error("expected ',' or '}'");
            }
        }

        List<Object> array(int depth) {
            List<Object> a = new ArrayList<>();
            i++; // [
            space();
            if (i < s.length() && s.charAt(i) == ']') {
                i++;
                return a;
            }
            while (true) {
                space();
                a.add(value(depth + 1));
                space();
                if (i >= s.length()) throw error("unexpected end of input in an array");
                char c = s.charAt(i++);
                if (c == ']') return a;
                if (c != ',') throw error("expected ',' or ']'");
            }
        }

        String string() {
            i++; // "
            StringBuilder b = new StringBuilder();
            while (true) {
                if (i >= s.length()) throw error("unterminated string");
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c < 0x20) throw error("control character in a string");
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                if (i >= s.length()) throw error("unterminated escape");
                char e = s.charAt(i++);
                switch (e) {
                    case '"': b.append('"'); break;
                    case '\\': b.append('\\'); break;
                    case '/': b.append('/'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'n': b.append('\n'); break;
                    case 'r': b.append('\r'); break;
                    case 't': b.append('\t'); break;
                    case 'u':
                        if (i + 4 > s.length()) throw error("short \\u escape");
                        int cp = 0;
                        for (int k = 0; k < 4; k++) {
                            int d = Character.digit(s.charAt(i + k), 16);
                            if (d < 0) throw error("bad \\u escape");
                            cp = cp * 16 + d;
                        }
                        i += 4;
                        b.append((char) cp); // surrogate pairs arrive as two escapes
                        break;
                    default:
                        throw error("bad escape \\" + e);
                }
            }
        }

        Object number() {
            int start = i;
            if (s.charAt(i) == '-') i++;
            int digits = i;
            while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
            if (i == digits) throw error("bad number");
            if (s.charAt(digits) == '0' && i - digits > 1) throw error("leading zero in a number");
            boolean integer = true;
            if (i < s.length() && s.charAt(i) == '.') {
                integer = false;
                i++;
                int f = i;
                while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
                if (i == f) throw error("bad fraction");
            }
            if (i < s.length() && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
                integer = false;
                i++;
                if (i < s.length() && (s.charAt(i) == '+' || s.charAt(i) == '-')) i++;
                int e = i;
                while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
                if (i == e) throw error("bad exponent");
            }
            String t = s.substring(start, i);
            if (integer) {
                BigInteger v = new BigInteger(t);
                return v.bitLength() < 64 ? (Object) v.longValue() : v;
            }
            return new BigDecimal(t).doubleValue();
        }
    }

    /** Writes v (Map, List, String, Number, Boolean, null, {@link Raw}) as JSON. */
    static String write(Object v) {
        StringBuilder b = new StringBuilder();
        write(b, v);
        return b.toString();
    }

    private static void write(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof String str) {
            quote(b, str);
        } else if (v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Double d) {
            if (d.isNaN() || d.isInfinite()) throw new IllegalArgumentException("json: " + d + " is not a JSON number");
            b.append(d);
        } else if (v instanceof Float f) {
            write(b, f.doubleValue());
        } else if (v instanceof Number) {
            b.append(v);
        } else if (v instanceof Raw r) {
            b.append(r.json());
        } else if (v instanceof Map<?, ?> m) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) b.append(',');
                first = false;
                quote(b, String.valueOf(e.getKey()));
                b.append(':');
                write(b, e.getValue());
            }
            b.append('}');
        } else if (v instanceof List<?> l) {
            b.append('[');
            for (int k = 0; k < l.size(); k++) {
                if (k > 0) b.append(',');
                write(b, l.get(k));
            }
            b.append(']');
        } else {
            throw new IllegalArgumentException("json: cannot write a " + v.getClass().getName());
        }
    }

    private static void quote(StringBuilder b, String s) {
        b.append('"');
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20 || c == 0x2028 || c == 0x2029) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        b.append('"');
    }

    // Accessors for answers: absent or null members give the default.

    static String str(Map<String, Object> m, String k) {
        Object v = m.get(k);
        return v == null ? "" : v instanceof String s ? s : String.valueOf(v);
    }

    /** A whole number given as a JSON number or as a decimal string (tokens are strings). */
    static long num(Map<String, Object> m, String k, long def) {
        Object v = m.get(k);
        if (v instanceof Long l) return l;
        if (v instanceof Number n) return n.longValue();
        if (v instanceof String s && !s.isEmpty()) {
            try {
                return Long.parseLong(s);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("json: member " + k + ": \"" + s + "\" is not a whole number");
            }
        }
        return def;
    }

    static boolean bool(Map<String, Object> m, String k) {
        return Boolean.TRUE.equals(m.get(k));
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Map<String, Object> m, String k) {
        Object v = m.get(k);
        return v instanceof Map ? (Map<String, Object>) v : null;
    }
}
