/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "format-table.h"

struct Table {
        const TableColumn *columns;
        size_t n_columns;
        size_t n_rows;
        char (*cells)[TABLE_CELL_MAX];
};

int table_new(const TableColumn *columns, size_t n_columns, size_t n_rows, Table **ret) {
        _cleanup_(table_freep) Table *t = calloc(1, sizeof(*t));

        if (!t)
                return -ENOMEM;
        *t = (Table) {
                .columns = columns,
                .n_columns = n_columns,
                .n_rows = n_rows,
                .cells = calloc(MAX(n_rows, 1u) * MAX(n_columns, 1u), TABLE_CELL_MAX),
        };
        if (!t->cells)
                return -ENOMEM;
        *ret = TAKE_PTR(t);
        return 0;
}

Table *table_free(Table *t) {
        if (t)
                free(t->cells);
        free(t);
        return NULL;
}

char *table_cell(Table *t, size_t row, size_t column) {
        return t->cells[row * t->n_columns + column];
}

void table_printf(Table *t, size_t row, size_t column, const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        (void) vsnprintf(table_cell(t, row, column), TABLE_CELL_MAX, format, ap);
        va_end(ap);
}

static const char *cell_text(const Table *t, size_t row, size_t column) {
        return t->cells[row * t->n_columns + column];
}

static void print_cell(const Table *t, FILE *f, size_t width, size_t column, const char *text) {
        bool last = column + 1 == t->n_columns;

        if (t->columns[column].right_align)
                fprintf(f, "%*s", (int) width, text);
        else if (last)
                fputs(text, f);
        else
                fprintf(f, "%-*s", (int) width, text);
        fputs(last ? "\n" : "  ", f);
}

void table_print(const Table *t, FILE *f) {
        size_t widths[16] = {};

        if (t->n_columns > ELEMENTSOF(widths))
                abort();

        for (size_t c = 0; c < t->n_columns; c++) {
                widths[c] = strlen(t->columns[c].header);
                for (size_t r = 0; r < t->n_rows; r++)
                        widths[c] = MAX(widths[c], strlen(cell_text(t, r, c)));
        }
        for (size_t c = 0; c < t->n_columns; c++)
                print_cell(t, f, widths[c], c, t->columns[c].header);
        for (size_t r = 0; r < t->n_rows; r++)
                for (size_t c = 0; c < t->n_columns; c++)
                        print_cell(t, f, widths[c], c, cell_text(t, r, c));
}
