//! The catalog views' columns: [`VIEW_DDL`] and the array columns among them
//! ([`ARRAY_COLUMNS`]).

use crate::types::SqlType;

/// The views' columns that hold arrays, with their types (`int2vector`, `oidvector`,
/// `smallint[]`): created as `text` (their text form), then given these types (see [`super::create_views`]).
pub const ARRAY_COLUMNS: &[(&str, &str, SqlType)] = &[
    ("pg_index", "indkey", SqlType::Vector(&SqlType::Int2)),
    ("pg_index", "indcollation", SqlType::Vector(&SqlType::Int8)),
    ("pg_index", "indclass", SqlType::Vector(&SqlType::Int8)),
    ("pg_index", "indoption", SqlType::Vector(&SqlType::Int2)),
    ("pg_constraint", "conkey", SqlType::Array(&SqlType::Int2)),
    ("pg_constraint", "confkey", SqlType::Array(&SqlType::Int2)),
];

/// The views (a `CREATE TABLE` of the views' database each; the columns [`ARRAY_COLUMNS`]
/// names are arrays, stored as their text).
pub const VIEW_DDL: &[(&str, &str)] = &[
    ("pg_namespace", "oid bigint, nspname text, nspowner bigint, nspacl text"),
    (
        "pg_class",
        "oid bigint, relname text, relnamespace bigint, reltype bigint, reloftype bigint, relowner bigint, \
         relam bigint, relfilenode bigint, reltablespace bigint, relpages integer, reltuples double precision, \
         relallvisible integer, reltoastrelid bigint, relhasindex boolean, relisshared boolean, \
         relpersistence text, relkind text, relnatts smallint, relchecks smallint, relhasrules boolean, \
         relhastriggers boolean, relhassubclass boolean, relrowsecurity boolean, relforcerowsecurity boolean, \
         relispopulated boolean, relreplident text, relispartition boolean, relrewrite bigint, \
         relfrozenxid bigint, relminmxid bigint, relacl text, reloptions text, relpartbound text",
    ),
    (
        "pg_attribute",
        "attrelid bigint, attname text, atttypid bigint, attstattarget integer, attlen smallint, \
         attnum smallint, attndims integer, attcacheoff integer, atttypmod integer, attbyval boolean, \
         attalign text, attstorage text, attcompression text, attnotnull boolean, atthasdef boolean, \
         atthasmissing boolean, attidentity text, attgenerated text, attisdropped boolean, \
         attislocal boolean, attinhcount integer, attcollation bigint, attacl text, attoptions text, \
         attfdwoptions text, attmissingval text",
    ),
    (
        "pg_type",
        "oid bigint, typname text, typnamespace bigint, typowner bigint, typlen smallint, typbyval boolean, \
         typtype text, typcategory text, typispreferred boolean, typisdefined boolean, typdelim text, \
         typrelid bigint, typsubscript text, typelem bigint, typarray bigint, typinput text, typoutput text, \
         typreceive text, typsend text, typmodin text, typmodout text, typanalyze text, typalign text, \
         typstorage text, typnotnull boolean, typbasetype bigint, typtypmod integer, typndims integer, \
         typcollation bigint, typdefaultbin text, typdefault text, typacl text",
    ),
    (
        "pg_index",
        "indexrelid bigint, indrelid bigint, indnatts smallint, indnkeyatts smallint, indisunique boolean, \
         indnullsnotdistinct boolean, indisprimary boolean, indisexclusion boolean, indimmediate boolean, \
         indisclustered boolean, indisvalid boolean, indcheckxmin boolean, indisready boolean, \
         indislive boolean, indisreplident boolean, indkey text, indcollation text, indclass text, \
         indoption text, indexprs text, indpred text",
    ),
    (
        "pg_constraint",
        "oid bigint, conname text, connamespace bigint, contype text, condeferrable boolean, \
         condeferred boolean, convalidated boolean, conrelid bigint, contypid bigint, conindid bigint, \
         conparentid bigint, confrelid bigint, confupdtype text, confdeltype text, confmatchtype text, \
         conislocal boolean, coninhcount integer, connoinherit boolean, conkey text, confkey text, \
         conbin text",
    ),
    (
        "pg_database",
        "oid bigint, datname text, datdba bigint, encoding integer, datlocprovider text, \
         datistemplate boolean, datallowconn boolean, datconnlimit integer, datfrozenxid bigint, \
         datminmxid bigint, dattablespace bigint, datcollate text, datctype text, daticulocale text, \
         datcollversion text, datacl text",
    ),
    (
        "pg_settings",
        "name text, setting text, unit text, category text, short_desc text, extra_desc text, context text, \
         vartype text, source text, min_val text, max_val text, enumvals text, boot_val text, reset_val text, \
         sourcefile text, sourceline integer, pending_restart boolean",
    ),
    ("pg_am", "oid bigint, amname text, amhandler text, amtype text"),
    (
        "pg_proc",
        "oid bigint, proname text, pronamespace bigint, proowner bigint, prolang bigint, procost real, \
         prorows real, provariadic bigint, prosupport text, prokind text, prosecdef boolean, \
         proleakproof boolean, proisstrict boolean, proretset boolean, provolatile text, proparallel text, \
         pronargs smallint, pronargdefaults smallint, prorettype bigint, proargtypes text, \
         proallargtypes text, proargmodes text, proargnames text, proargdefaults text, protrftypes text, \
         prosrc text, probin text, prosqlbody text, proconfig text, proacl text",
    ),
    (
        "pg_roles",
        "oid bigint, rolname text, rolsuper boolean, rolinherit boolean, rolcreaterole boolean, \
         rolcreatedb boolean, rolcanlogin boolean, rolreplication boolean, rolconnlimit integer, \
         rolpassword text, rolvaliduntil timestamp, rolbypassrls boolean, rolconfig text",
    ),
    (
        "pg_user",
        "usename text, usesysid bigint, usecreatedb boolean, usesuper boolean, userepl boolean, \
         usebypassrls boolean, passwd text, valuntil timestamp, useconfig text",
    ),
    ("pg_description", "objoid bigint, classoid bigint, objsubid integer, description text"),
    ("pg_attrdef", "oid bigint, adrelid bigint, adnum smallint, adbin text"),
    (
        "pg_collation",
        "oid bigint, collname text, collnamespace bigint, collowner bigint, collprovider text, \
         collisdeterministic boolean, collencoding integer, collcollate text, collctype text",
    ),
    ("pg_tablespace", "oid bigint, spcname text, spcowner bigint, spcacl text, spcoptions text"),
    (
        "pg_sequence",
        "seqrelid bigint, seqtypid bigint, seqstart bigint, seqincrement bigint, seqmax bigint, \
         seqmin bigint, seqcache bigint, seqcycle boolean",
    ),
    (
        "pg_opclass",
        "oid bigint, opcmethod bigint, opcname text, opcnamespace bigint, opcowner bigint, opcfamily bigint, \
         opcintype bigint, opcdefault boolean, opckeytype bigint",
    ),
    ("pg_inherits", "inhrelid bigint, inhparent bigint, inhseqno integer, inhdetachpending boolean"),
    ("pg_trigger", "oid bigint, tgrelid bigint, tgname text, tgenabled text, tgisinternal boolean"),
    ("pg_extension", "oid bigint, extname text, extowner bigint, extnamespace bigint, extversion text"),
    (
        "pg_tables",
        "schemaname text, tablename text, tableowner text, tablespace text, hasindexes boolean, \
         hasrules boolean, hastriggers boolean, rowsecurity boolean",
    ),
    ("pg_indexes", "schemaname text, tablename text, indexname text, tablespace text, indexdef text"),
    // The definitions `pg_get_indexdef` and `pg_get_constraintdef` return, by oid.
    ("nvmedb_catalog_defs", "def_oid bigint, def_text text"),
    // Names by oid for `::regclass` and `::regtype` (column names no catalog uses, so a
    // look-up's argument never resolves to them).
    ("nvmedb_relnames", "rel_oid bigint, rel_name text"),
    ("nvmedb_typnames", "type_oid bigint, type_name text"),
    ("nvmedb_nspnames", "nsp_oid bigint, nsp_name text"),
    (
        "schemata",
        "catalog_name text, schema_name text, schema_owner text, default_character_set_catalog text, \
         default_character_set_schema text, default_character_set_name text, sql_path text",
    ),
    (
        "tables",
        "table_catalog text, table_schema text, table_name text, table_type text, \
         self_referencing_column_name text, reference_generation text, user_defined_type_catalog text, \
         user_defined_type_schema text, user_defined_type_name text, is_insertable_into text, is_typed text, \
         commit_action text",
    ),
    (
        "columns",
        "table_catalog text, table_schema text, table_name text, column_name text, ordinal_position integer, \
         column_default text, is_nullable text, data_type text, character_maximum_length integer, \
         character_octet_length integer, numeric_precision integer, numeric_precision_radix integer, \
         numeric_scale integer, datetime_precision integer, udt_catalog text, udt_schema text, udt_name text, \
         is_identity text, identity_generation text, is_generated text, generation_expression text, \
         is_updatable text",
    ),
    (
        "table_constraints",
        "constraint_catalog text, constraint_schema text, constraint_name text, table_catalog text, \
         table_schema text, table_name text, constraint_type text, is_deferrable text, \
         initially_deferred text, enforced text, nulls_distinct text",
    ),
    (
        "key_column_usage",
        "constraint_catalog text, constraint_schema text, constraint_name text, table_catalog text, \
         table_schema text, table_name text, column_name text, ordinal_position integer, \
         position_in_unique_constraint integer",
    ),
    ("views", "table_catalog text, table_schema text, table_name text, view_definition text"),
];
