/* Windows over a video, for timeline and watch: the note on a --window the frames cannot span
 * (a window's top-k and JSON are src/app/json.c's; the frame plan and the spans are the
 * library's: tubelet_window_plan, tubelet_window_span). */
#include <math.h>

#include "cli.h"

void cli_window_note(const char *src, double window, double fps, int T, int fstride) {
    const double got = T * fstride / fps;
    if (window > 0 && fabs(got - window) > 0.05 * window) /* more than rounding noise */
        fprintf(stderr, "note: %s: --window %g s spans %.2f s: the model's %d frames at a whole "
                "stride of %d frame%s at %.2f fps\n", src, window, got, T, fstride,
                fstride == 1 ? "" : "s", fps);
}
