/* Stands for the GPU plugin: it needs libcz_fake_dep.so.1, which lies in a folder the system's
 * search does not know (test_gpu_loader.c). */
int cz_fake_dep_value(void);
int cz_fake_plugin_value(void);
int cz_fake_plugin_value(void)
{
    return cz_fake_dep_value() + 1;
}
