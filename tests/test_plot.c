/* The labels of tubelet's PNGs (issue 27): the bitmap font draws every printable ASCII character,
 * each differently; curves.png has a title, tick values beside each axis, a legend in each
 * series' colour, and an accuracy panel only for a classifier (pretraining has no accuracy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/plot.h"
#include "tubelet_io.h"

static const uint8_t ink[3] = {0, 0, 0};

/* Pixels of colour c (or, c NULL, not white) in the box [x0, x1) x [y0, y1). */
static int count(const uint8_t *img, int w, int x0, int y0, int x1, int y1, const uint8_t *c) {
    int n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const uint8_t *p = img + ((size_t)y * w + x) * 3;
            n += c ? !memcmp(p, c, 3) : (p[0] != 255 || p[1] != 255 || p[2] != 255);
        }
    return n;
}

static void font(void) {
    enum { W = 8, H = 12 };
    static uint8_t glyph[95][W * H * 3];
    for (int ch = 32; ch < 127; ch++) {
        const char s[2] = {(char)ch, 0};
        uint8_t *g = glyph[ch - 32];
        memset(g, 255, sizeof glyph[0]);
        CHECK(tubelet_png_text(g, W, H, 1, 1, 1, ink, s) == 5, "'%c': width", ch);
        const int n = count(g, W, 0, 0, W, H, NULL);
        CHECK(ch == ' ' ? n == 0 : n > 0, "'%c' draws %d pixels", ch, n);
        int same = 0;
        for (int k = 33; k < ch; k++) same = !memcmp(glyph[k - 32], g, sizeof glyph[0]) ? k : same;
        CHECK(!same, "'%c' and '%c' look the same", same, ch);
    }
    CHECK(tubelet_png_text(NULL, 0, 0, 0, 0, 2, ink, "epoch") == (6 * 5 - 1) * 2,
          "width of a word");
    uint8_t img[10 * 10 * 3];
    memset(img, 255, sizeof img);
    tubelet_png_text(img, 10, 10, 7, 7, 3, ink, "W"); /* clipped, not written past the image */
    CHECK(count(img, 10, 0, 0, 10, 10, NULL) > 0, "a clipped glyph");
}

static void curves(void) {
    static const uint8_t blue[3] = {31, 119, 180}, orange[3] = {255, 127, 14},
                         green[3] = {44, 160, 44};
    double tl[10], vl[10], va[10];
    for (int i = 0; i < 10; i++)
        tl[i] = 2.0 / (1 + i), vl[i] = 2.2 / (1 + 0.5 * i), va[i] = 0.1 * i;
    int w, h, pw, ph;
    uint8_t *img = tb_plot_render(tl, vl, va, 10, &w, &h);
    uint8_t *pre = tb_plot_render(tl, vl, NULL, 10, &pw, &ph);
    CHECK(img && pre, "out of memory");
    if (!img || !pre) goto done;
    CHECK(w >= 400 && h > ph && pw == w, "sizes %dx%d, pretraining %dx%d", w, h, pw, ph);
    /* the title: text in the top band, centred */
    CHECK(count(img, w, w / 4, 0, 3 * w / 4, 40, NULL) > 200, "no title");
    CHECK(count(img, w, 0, 0, w / 5, 40, NULL) == 0, "the title is not centred");
    /* tick values left of each panel's axis (the left fifth of the image), in both panels */
    CHECK(count(img, w, 30, 60, w / 8, h / 2 - 20, NULL) > 100, "no loss tick values");
    CHECK(count(img, w, 30, h / 2 + 20, w / 8, h - 40, NULL) > 100, "no accuracy tick values");
    /* an axis name and the epoch ticks: text at the far left and along the bottom */
    CHECK(count(img, w, 0, 60, 28, h - 40, NULL) > 50, "no y-axis name");
    CHECK(count(img, w, w / 3, h - 36, 2 * w / 3, h, NULL) > 30, "no x-axis name");
    /* legends: a swatch of each colour above its panel, and the curves in the same colours */
    CHECK(count(img, w, w / 2, 40, w, 70, blue) > 20 &&
              count(img, w, w / 2, 40, w, 70, orange) > 20,
          "no loss legend");
    CHECK(count(img, w, 0, 0, w, h, green) > 200, "no accuracy curve");
    /* pretraining: losses only, no accuracy anywhere */
    CHECK(count(pre, pw, 0, 0, pw, ph, green) == 0, "pretraining plots an accuracy");
    CHECK(count(pre, pw, 0, 0, pw, ph, blue) > 200 && count(pre, pw, 0, 0, pw, ph, orange) > 200,
          "pretraining: no loss curves");
    /* small losses (tick values as long as "0.00025"): a white column between the axis name and
     * the tick values (issue 39: the name overlapped them) */
    {
        double sl[4] = {0.0011, 0.0009, 0.0006, 0.0004};
        int iw, ih;
        uint8_t *sm = tb_plot_render(sl, sl, NULL, 4, &iw, &ih);
        CHECK(sm != NULL, "out of memory");
        /* 8 white columns at least (within a tick value, around its '.', there are up to 6),
         * ink on both sides */
        int gap = 0, seen_name = 0;
        for (int x = 0; sm && x < iw / 6 && !gap; x++) {
            const int ink_here = count(sm, iw, x, 60, x + 8, ih - 40, NULL) > 0;
            if (count(sm, iw, x, 60, x + 1, ih - 40, NULL) > 0) seen_name = 1;
            else if (seen_name && !ink_here && count(sm, iw, x + 8, 60, iw / 6, ih - 40, NULL) > 0)
                gap = 1;
        }
        CHECK(gap, "the y-axis name touches the tick values");
        free(sm);
    }
    /* one epoch, a constant, NaN: still a picture */
    double one = 1.0, nan = NAN;
    free(pre);
    pre = tb_plot_render(&one, &nan, &nan, 1, &pw, &ph);
    CHECK(pre && count(pre, pw, 0, 0, pw, ph, blue) > 0, "one epoch");
done:
    free(img), free(pre);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(font());
    CASE(curves());
    return check_done();
}
