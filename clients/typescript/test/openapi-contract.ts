/**
 * Checks declared TypeScript types against `openapi/openapi.json`: every
 * field, enum value and problem slug that a type names must exist in the
 * document with the same type. The client's tests and the console's use it,
 * each with its own table of which type stands for which schema.
 *
 * The TypeScript compiler is passed in (each package has its own), so this
 * file imports nothing at run time and the console can load it as it is.
 */

import type TypeScript from "typescript";

type TS = typeof TypeScript;

export interface Schema {
  type?: string | string[];
  enum?: unknown[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  $ref?: string;
  oneOf?: Schema[];
  description?: string;
}

export interface OpenApiDocument {
  paths: Record<string, Record<string, { responses?: Record<string, { description?: string }> }>>;
  components: { schemas: Record<string, Schema> };
}

/**
 * A declared type (an interface, or a union of string literals) and what
 * it stands for: a schema of the document, or a list of words the document
 * names (its problem slugs, a field's documented values).
 */
export type Binding = { type: string; file: string } & (
  | {
      schema: string;
      /** A request body: the type may send less than the schema accepts. */
      sent?: boolean;
    }
  | { words: readonly string[]; from: string }
);

export interface ContractOptions {
  /** The field's name on the wire, from a property's name (`expiresAtMs` to `expires_at_ms`, or as it is). */
  wireName: (property: string) => string;
}

/** The problem slugs the document lists: each error response's description opens with `` `slug`: ``. */
export function problemSlugs(document: OpenApiDocument): string[] {
  const slugs = new Set<string>();
  for (const operations of Object.values(document.paths)) {
    for (const operation of Object.values(operations)) {
      for (const response of Object.values(operation.responses ?? {})) {
        for (const match of (response.description ?? "").matchAll(/`([a-z][a-z-]*)`:/g)) slugs.add(match[1]!);
      }
    }
  }
  return [...slugs].sort();
}

/** The words in backquotes of a schema's field's description, such as the documented values of a string. */
export function documentedWords(document: OpenApiDocument, schema: string, field: string): string[] {
  const description = document.components.schemas[schema]?.properties?.[field]?.description ?? "";
  return [...description.matchAll(/`([^`]+)`/g)].map((match) => match[1]!);
}

/** `expiresAtMs` as the wire spells it: `expires_at_ms`. */
export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/** What the declared types of `program` say that `document` does not; empty when they agree. */
export function contractViolations(
  ts: TS,
  program: TypeScript.Program,
  document: OpenApiDocument,
  bindings: readonly Binding[],
  options: ContractOptions,
): string[] {
  const checker = new ContractChecker(ts, program.getTypeChecker(), document, options);
  for (const binding of bindings) {
    const type = declaredType(ts, program, binding);
    if (!type) {
      checker.violations.push(`${binding.file}: no type ${binding.type}`);
    } else if ("words" in binding) {
      checker.checkWords(type, binding.words, binding.type, binding.from);
    } else {
      checker.check(type, { $ref: `#/components/schemas/${binding.schema}` }, binding.type, {
        required: true,
        sent: binding.sent ?? false,
      });
    }
  }
  return checker.violations;
}

function declaredType(ts: TS, program: TypeScript.Program, binding: Binding): TypeScript.Type | undefined {
  const file = program.getSourceFiles().find((source) => source.fileName.endsWith(binding.file));
  const checker = program.getTypeChecker();
  for (const statement of file?.statements ?? []) {
    const declares = ts.isInterfaceDeclaration(statement) || ts.isTypeAliasDeclaration(statement);
    if (declares && statement.name.text === binding.type) return checker.getTypeAtLocation(statement.name);
  }
  return undefined;
}

/** What the wire may carry in one place: kinds of JSON value, and the allowed strings when there is an enum. */
interface WireKinds {
  kinds: Set<string>;
  strings: unknown[] | undefined;
  items: Schema | undefined;
  object: Schema | undefined;
}

/** Where a type is compared: whether the document requires the field, and which way it travels. */
interface Place {
  required: boolean;
  sent: boolean;
  /** The field's name on the wire, when the place is a field. */
  field?: string;
}

class ContractChecker {
  readonly violations: string[] = [];
  /** Object types already compared with a schema: the comparison of a recursive shape ends. */
  private readonly compared = new Set<string>();

  constructor(
    private readonly ts: TS,
    private readonly checker: TypeScript.TypeChecker,
    private readonly document: OpenApiDocument,
    private readonly options: ContractOptions,
  ) {}

  /** Compares `type` with what `schema` allows, at `where`. */
  check(type: TypeScript.Type, schema: Schema, where: string, place: Place): void {
    const wire = this.kinds(schema);
    const ours = this.constituents(type).filter((part) => !(part.flags & this.ts.TypeFlags.Undefined));
    const covered = new Set<string>();
    const before = this.violations.length;
    for (const part of ours) {
      const kind = this.kindOf(part);
      if (kind === "unknown") return;
      covered.add(kind === "bigint" ? "number" : kind);
      if (kind === "null" && !place.required && !place.sent) continue;
      if (!wire.kinds.has(kind === "bigint" ? "number" : kind)) {
        this.violations.push(`${where}: ${this.checker.typeToString(part)}, but the document has ${describe(wire)}`);
      } else if (kind === "bigint" && place.field !== "fencing_token") {
        this.violations.push(`${where}: bigint, but only fencing_token is read as one`);
      } else if (kind === "string" && part.isStringLiteral() && wire.strings && !wire.strings.includes(part.value)) {
        this.violations.push(`${where}: "${part.value}" is not one of ${wire.strings.map((s) => `"${s}"`).join(", ")}`);
      } else if (kind === "array" && wire.items) {
        const element = this.checker.getTypeArguments(part as TypeScript.TypeReference)[0];
        if (element) this.check(element, wire.items, `${where}[]`, { required: true, sent: place.sent });
      } else if (kind === "object" && wire.object) {
        this.checkObject(part, wire.object, where, place.sent);
      }
    }
    if (place.sent || this.violations.length > before) return;
    // What the gateway may send, this type must take (a field it need not
    // send may be absent instead of null: the document writes both as null).
    for (const kind of wire.kinds) {
      if (covered.has(kind) || (kind === "null" && !place.required)) continue;
      this.violations.push(`${where}: the document allows ${kind} here, which ${this.checker.typeToString(type)} does not`);
    }
  }

  /** Every member of a string-literal union must be one of `words`. */
  checkWords(type: TypeScript.Type, words: readonly string[], where: string, from: string): void {
    for (const part of this.constituents(type)) {
      if (!part.isStringLiteral()) this.violations.push(`${where}: ${this.checker.typeToString(part)} is not a string literal`);
      else if (!words.includes(part.value)) this.violations.push(`${where}: "${part.value}" is not among ${from}`);
    }
  }

  private checkObject(type: TypeScript.Type, schema: Schema, where: string, sent: boolean): void {
    const key = `${this.checker.typeToString(type)} ${JSON.stringify(schema.properties ? Object.keys(schema.properties) : [])}`;
    if (this.compared.has(key)) return;
    this.compared.add(key);
    const properties = schema.properties ?? {};
    for (const property of this.checker.getPropertiesOfType(type)) {
      const field = this.options.wireName(property.name);
      const at = `${where}.${property.name}`;
      const fieldSchema = properties[field];
      if (!fieldSchema) {
        this.violations.push(`${at}: the document has no field ${field} here`);
        continue;
      }
      const declaration = property.valueDeclaration ?? property.declarations?.[0];
      if (!declaration) continue;
      const required = (schema.required ?? []).includes(field);
      const optional = (property.flags & this.ts.SymbolFlags.Optional) !== 0;
      if (!sent && !optional && !required && !this.kinds(fieldSchema).kinds.has("null")) {
        this.violations.push(`${at}: always expected, but the document does not require ${field}`);
      }
      if (sent && optional && required) this.violations.push(`${at}: may be left out, but the document requires ${field}`);
      const fieldType = this.checker.getTypeOfSymbolAtLocation(property, declaration);
      this.check(fieldType, fieldSchema, at, { required, sent, field });
    }
  }

  private constituents(type: TypeScript.Type): TypeScript.Type[] {
    // `boolean` is the union `true | false`: one kind.
    if (type.flags & this.ts.TypeFlags.Boolean) return [type];
    return type.isUnion() ? type.types : [type];
  }

  private kindOf(type: TypeScript.Type): string {
    const { TypeFlags } = this.ts;
    if (type.flags & (TypeFlags.Unknown | TypeFlags.Any)) return "unknown";
    if (type.flags & TypeFlags.Null) return "null";
    if (type.flags & TypeFlags.StringLike) return "string";
    if (type.flags & TypeFlags.NumberLike) return "number";
    if (type.flags & TypeFlags.BigIntLike) return "bigint";
    if (type.flags & TypeFlags.BooleanLike) return "boolean";
    if (this.checker.isArrayType(type)) return "array";
    if (type.flags & TypeFlags.Object) return "object";
    return this.checker.typeToString(type);
  }

  /** The kinds of JSON value `schema` allows, through `$ref`, `oneOf` and type lists. */
  private kinds(schema: Schema): WireKinds {
    const resolved = this.resolve(schema);
    const wire: WireKinds = { kinds: new Set(), strings: resolved.enum, items: resolved.items, object: undefined };
    for (const alternative of resolved.oneOf ?? []) {
      const inner = this.kinds(alternative);
      for (const kind of inner.kinds) wire.kinds.add(kind);
      wire.strings ??= inner.strings;
      wire.items ??= inner.items;
      wire.object ??= inner.object;
    }
    const types = resolved.type === undefined ? [] : [resolved.type].flat();
    for (const type of types) wire.kinds.add(type === "integer" ? "number" : type);
    if (resolved.properties) {
      wire.kinds.add("object");
      wire.object = resolved;
    }
    return wire;
  }

  private resolve(schema: Schema): Schema {
    if (!schema.$ref) return schema;
    const name = schema.$ref.replace("#/components/schemas/", "");
    const target = this.document.components.schemas[name];
    if (!target) throw new Error(`the document refers to a schema it lacks: ${schema.$ref}`);
    return this.resolve(target);
  }
}

function describe(wire: WireKinds): string {
  return wire.kinds.size === 0 ? "no type" : [...wire.kinds].join(" or ");
}
