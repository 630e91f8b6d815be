/* SPDX-License-Identifier: MIT */
#pragma once

/* Plain-text tables with aligned columns, for the tools' human output
 * (machine output is JSON, built apart). Every cell is short — numbers,
 * durations, percentages — so a cell is a fixed TABLE_CELL_MAX bytes. */

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "macro.h"

#define TABLE_CELL_MAX 32

typedef struct TableColumn {
        const char *header;
        bool right_align; /* numbers; the last column is never padded */
} TableColumn;

typedef struct Table Table;

/* columns must outlive the table. -ENOMEM, or 0 with every cell "". */
int table_new(const TableColumn *columns, size_t n_columns, size_t n_rows, Table **ret);
Table *table_free(Table *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(Table *, table_free);

/* The cell's TABLE_CELL_MAX bytes, to format into. */
char *table_cell(Table *t, size_t row, size_t column);
/* snprintf into the cell: every value the tools show fits, and a cut cell
 * is better than no table. */
_printf_(4, 5) void table_printf(Table *t, size_t row, size_t column, const char *format, ...);

/* The header row, then every row, columns two spaces apart. */
void table_print(const Table *t, FILE *f);
